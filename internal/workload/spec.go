package workload

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSpec parses the compact form described in the package documentation and validates the
// result. Errors name the offending parameter.
func ParseSpec(s string) (Spec, error) {
	shape, params, _ := strings.Cut(s, ":")
	var spec Spec
	var err error
	switch shape {
	case ShapePhase:
		spec, err = parsePhases(params)
	case ShapeTrace:
		spec, err = parseTrace(params)
	default:
		spec, err = parseSimple(shape, params)
	}
	if err != nil {
		return Spec{}, fmt.Errorf("workload spec %q: %w", s, err)
	}
	if err := spec.Validate(); err != nil {
		return Spec{}, fmt.Errorf("workload spec %q: %w", s, err)
	}
	return spec, nil
}

// parseSimple parses the parameters of zipf, uniform, loop and scan.
func parseSimple(shape, params string) (Spec, error) {
	spec := Spec{Shape: shape, ValueSize: Fixed(DefaultValueSize)}
	seen := map[string]bool{}
	for _, item := range splitNonEmpty(params, ",") {
		name, value, ok := strings.Cut(item, "=")
		if !ok {
			return Spec{}, fmt.Errorf("parameter %q: want name=value", item)
		}
		if seen[name] {
			return Spec{}, fmt.Errorf("parameter %s: given twice", name)
		}
		seen[name] = true
		var err error
		switch name {
		case "keys":
			spec.Keys, err = strconv.Atoi(value)
		case "skew":
			if shape != ShapeZipf {
				return Spec{}, fmt.Errorf("parameter skew: only zipf has a skew, not %q", shape)
			}
			spec.Skew, err = strconv.ParseFloat(value, 64)
		case "value":
			spec.ValueSize, err = parseSizeDist(value)
		case "prefix":
			spec.KeyPrefix = value
		default:
			return Spec{}, fmt.Errorf("parameter %q: unknown (want keys, skew, value or prefix)", name)
		}
		if err != nil {
			return Spec{}, fmt.Errorf("parameter %s=%q: %w", name, value, err)
		}
	}
	return spec, nil
}

// parsePhases parses "N@SPEC;N@SPEC;...[;prefix=P]".
func parsePhases(params string) (Spec, error) {
	spec := Spec{Shape: ShapePhase}
	prefixSeen := false
	for i, item := range splitNonEmpty(params, ";") {
		if p, ok := strings.CutPrefix(item, "prefix="); ok {
			if prefixSeen {
				return Spec{}, fmt.Errorf("phase prefix given twice")
			}
			prefixSeen, spec.KeyPrefix = true, p
			continue
		}
		count, sub, ok := strings.Cut(item, "@")
		if !ok {
			return Spec{}, fmt.Errorf("phase item %d %q: want ACCESSES@SPEC", i+1, item)
		}
		n, err := strconv.Atoi(count)
		if err != nil {
			return Spec{}, fmt.Errorf("phase item %d: accesses %q: %w", i+1, count, err)
		}
		shape, subParams, _ := strings.Cut(sub, ":")
		var subSpec Spec
		switch shape {
		case ShapePhase:
			return Spec{}, fmt.Errorf("phase item %d: phases cannot nest", i+1)
		case ShapeTrace:
			subSpec, err = parseTrace(subParams)
		default:
			subSpec, err = parseSimple(shape, subParams)
		}
		if err != nil {
			return Spec{}, fmt.Errorf("phase item %d: %w", i+1, err)
		}
		spec.Phases = append(spec.Phases, Phase{Spec: subSpec, Accesses: n})
	}
	return spec, nil
}

// parseTrace parses "[prefix=P,]file=PATH"; the file takes the rest of the string.
func parseTrace(params string) (Spec, error) {
	spec := Spec{Shape: ShapeTrace}
	rest, prefixSeen := params, false
	for rest != "" {
		if file, ok := strings.CutPrefix(rest, "file="); ok {
			spec.TraceFile = file
			return spec, nil
		}
		item, after, _ := strings.Cut(rest, ",")
		p, ok := strings.CutPrefix(item, "prefix=")
		if !ok {
			return Spec{}, fmt.Errorf("parameter %q: trace takes prefix= then file= (last)", item)
		}
		if prefixSeen {
			return Spec{}, fmt.Errorf("parameter prefix: given twice")
		}
		prefixSeen, spec.KeyPrefix, rest = true, p, after
	}
	return spec, nil
}

// parseSizeDist parses N, MIN-MAX or MIN-MAX/log.
func parseSizeDist(s string) (SizeDist, error) {
	body, log := strings.CutSuffix(s, "/log")
	lo, hi, isRange := strings.Cut(body, "-")
	min, err := strconv.ParseInt(lo, 10, 64)
	if err != nil {
		return SizeDist{}, fmt.Errorf("want N, MIN-MAX or MIN-MAX/log bytes: %w", err)
	}
	if !isRange {
		if log {
			return SizeDist{}, fmt.Errorf("/log needs a range MIN-MAX")
		}
		return Fixed(min), nil
	}
	max, err := strconv.ParseInt(hi, 10, 64)
	if err != nil {
		return SizeDist{}, fmt.Errorf("want N, MIN-MAX or MIN-MAX/log bytes: %w", err)
	}
	return SizeDist{Min: min, Max: max, LogUniform: log}, nil
}

func splitNonEmpty(s, sep string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, sep)
}

// String returns the compact form; ParseSpec(s.String()) gives s back for every Spec that
// ParseSpec produced.
func (s Spec) String() string {
	var b strings.Builder
	b.WriteString(s.Shape)
	b.WriteByte(':')
	switch s.Shape {
	case ShapePhase:
		for i, p := range s.Phases {
			if i > 0 {
				b.WriteByte(';')
			}
			b.WriteString(strconv.Itoa(p.Accesses))
			b.WriteByte('@')
			b.WriteString(p.String()) // the phase's own spec
		}
		if s.KeyPrefix != "" {
			b.WriteString(";prefix=")
			b.WriteString(s.KeyPrefix)
		}
	case ShapeTrace:
		if s.KeyPrefix != "" {
			b.WriteString("prefix=")
			b.WriteString(s.KeyPrefix)
			b.WriteByte(',')
		}
		b.WriteString("file=")
		b.WriteString(s.TraceFile)
	default:
		b.WriteString("keys=")
		b.WriteString(strconv.Itoa(s.Keys))
		if s.Shape == ShapeZipf {
			b.WriteString(",skew=")
			b.WriteString(strconv.FormatFloat(s.Skew, 'g', -1, 64))
		}
		b.WriteString(",value=")
		b.WriteString(s.ValueSize.String())
		if s.KeyPrefix != "" {
			b.WriteString(",prefix=")
			b.WriteString(s.KeyPrefix)
		}
	}
	return b.String()
}

// String returns N, MIN-MAX or MIN-MAX/log.
func (d SizeDist) String() string {
	if d.Min == d.Max && !d.LogUniform {
		return strconv.FormatInt(d.Min, 10)
	}
	s := strconv.FormatInt(d.Min, 10) + "-" + strconv.FormatInt(d.Max, 10)
	if d.LogUniform {
		s += "/log"
	}
	return s
}
