package planning

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Format is a document encoding.
type Format string

// The encodings a document can be written in.
const (
	FormatJSON Format = "json"
	FormatYAML Format = "yaml"
)

// DecodeSnapshot parses a PlanningSnapshot written as JSON or YAML, rejecting unknown fields
// (with their path), a wrong apiVersion or kind, and everything Snapshot.Validate rejects.
func DecodeSnapshot(data []byte) (*Snapshot, error) {
	var s Snapshot
	if err := decodeStrict(data, KindSnapshot, &s); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// DecodePlan parses a Plan written as JSON or YAML, rejecting unknown fields and a wrong
// apiVersion or kind.
func DecodePlan(data []byte) (*Plan, error) {
	var p Plan
	if err := decodeStrict(data, KindPlan, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Encode writes a document (a *Snapshot or a *Plan) as indented JSON or as YAML.
func Encode(v any, f Format) ([]byte, error) {
	switch f {
	case FormatJSON:
		out, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return nil, err
		}
		return append(out, '\n'), nil
	case FormatYAML:
		return yaml.Marshal(v)
	}
	return nil, fmt.Errorf("unknown format %q (want %q or %q)", f, FormatJSON, FormatYAML)
}

// decodeStrict turns YAML into JSON (JSON passes through), checks every field name against
// the target type so that an unknown field is reported with its path, checks apiVersion and
// kind, and decodes.
func decodeStrict(data []byte, kind string, into any) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return errors.New("empty document")
	}
	jsonData := trimmed
	if trimmed[0] != '{' {
		var err error
		if jsonData, err = yaml.YAMLToJSONStrict(trimmed); err != nil {
			return fmt.Errorf("invalid YAML: %w", err)
		}
	}
	var generic any
	dec := json.NewDecoder(bytes.NewReader(jsonData))
	dec.UseNumber()
	if err := dec.Decode(&generic); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	if dec.More() {
		return errors.New("invalid JSON: more than one document")
	}
	top, ok := generic.(map[string]any)
	if !ok {
		return fmt.Errorf("the document is %s, want an object with apiVersion %q and kind %q", aJSONKind(generic), APIVersion, kind)
	}
	if err := checkHeader(top, kind); err != nil {
		return err
	}
	if err := checkFields(generic, reflect.TypeOf(into).Elem(), ""); err != nil {
		return err
	}
	strict := json.NewDecoder(bytes.NewReader(jsonData))
	strict.DisallowUnknownFields()
	if err := strict.Decode(into); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return fmt.Errorf("%s: cannot use a JSON %s as %s", typeErr.Field, typeErr.Value, typeErr.Type)
		}
		return err
	}
	return nil
}

func checkHeader(top map[string]any, kind string) error {
	if v, _ := top["apiVersion"].(string); v != APIVersion {
		return fmt.Errorf("apiVersion: got %q, want %q", describe(top["apiVersion"]), APIVersion)
	}
	if k, _ := top["kind"].(string); k != kind {
		return fmt.Errorf("kind: got %q, want %q", describe(top["kind"]), kind)
	}
	return nil
}

func describe(v any) string {
	if v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// checkFields walks a decoded JSON value next to the Go type it will decode into and reports
// the first object key that type has no field for, or the first value of the wrong JSON type,
// with its path (tenants[2].memory: unknown field "mni"; nodes[0].memoryBytes: want an
// integer, got a string).
func checkFields(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return nil // null leaves the zero value
	}
	wrong := func(want string) error {
		return fmt.Errorf("%s: want %s, got %s", orTop(path), want, aJSONKind(v))
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return wrong("an object")
		}
		fields := jsonFields(t)
		// Sorted, so that the error names the same field on every run.
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			f, ok := fields[key]
			if !ok {
				if path == "" {
					return fmt.Errorf("unknown field %q", key)
				}
				return fmt.Errorf("%s: unknown field %q", path, key)
			}
			if err := checkFields(obj[key], f.Type, joinPath(path, key)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return wrong("a list")
		}
		for i, elem := range arr {
			if err := checkFields(elem, t.Elem(), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return wrong("a string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return wrong("true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			return wrong("an integer")
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || reflect.Zero(t).OverflowInt(i) {
			return fmt.Errorf("%s: %s is not an integer in the range of %s", path, n, t.Kind())
		}
	case reflect.Float32, reflect.Float64:
		if _, ok := v.(json.Number); !ok {
			return wrong("a number")
		}
	}
	return nil
}

func orTop(path string) string {
	if path == "" {
		return "document"
	}
	return path
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// jsonFields maps the JSON names of t's exported fields to the fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := make(map[string]reflect.StructField, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

// aJSONKind names the JSON type of a decoded value, with its article.
func aJSONKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "a value"
}
