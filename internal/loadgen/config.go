package loadgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Config is a whole load-generator run: settings and tenants. It is read from a YAML or JSON
// file (LoadConfigFile) whose keys are the json names below, and tenants may be added with
// ParseTenantFlag.
type Config struct {
	// Interval between reports (default 5s).
	Interval Duration `json:"interval,omitempty"`
	// Duration of the run; 0 runs until the context ends (SIGTERM).
	Duration Duration `json:"duration,omitempty"`
	// Timeout bounds connecting, authenticating and every request (default 5s; above the
	// sidecar's 1 s throttle wait, so a throttled reply is counted as throttled, not timed out).
	Timeout Duration `json:"timeout,omitempty"`
	// Seed from which each tenant's seed derives (with its name) unless it has its own.
	Seed uint64 `json:"seed,omitempty"`
	// CSV is the file the per-interval rows are written to; empty: no CSV.
	CSV string `json:"csv,omitempty"`
	// MetricsListen is the address of /metrics and /healthz; the command serves it, Run does
	// not.
	MetricsListen string         `json:"metricsListen,omitempty"`
	Tenants       []TenantConfig `json:"tenants,omitempty"`
}

// TenantConfig is one tenant's load.
type TenantConfig struct {
	// Name is the tenant ID, "<namespace>/<name>"; it labels reports and metrics and is the
	// user name given to the proxy unless User says otherwise.
	Name string `json:"name"`
	// Engine is "redis" or "memcached".
	Engine string `json:"engine"`
	// Address is "host:port" or "unix:/path/to.sock"; default: the endpoint file of
	// CredentialsDir.
	Address string `json:"address,omitempty"`
	// User authenticates with the password; default: the username file of CredentialsDir, else
	// Name. For a redis-server with requirepass (no proxy), use "default".
	User string `json:"user,omitempty"`
	// At most one of Password, PasswordFile and CredentialsDir gives the password; with none,
	// the connection does not authenticate (an engine without authentication).
	Password string `json:"password,omitempty"`
	// PasswordFile holds the password (a trailing newline is ignored); it is read again at
	// every reconnection, so a rotated Secret is picked up.
	PasswordFile string `json:"passwordFile,omitempty"`
	// CredentialsDir is a mounted copy of the tenant's "<name>-cache-credentials" Secret: the
	// files "password" (required), "username" and "endpoint" (optional).
	CredentialsDir string `json:"credentialsDir,omitempty"`
	// Workload is the compact workload spec (internal/workload.ParseSpec), e.g.
	// "zipf:keys=100000,skew=0.99,value=100-4096".
	Workload string `json:"workload"`
	// Rate is the target rate in accesses per second over all connections; 0: as fast as
	// possible.
	Rate float64 `json:"rate,omitempty"`
	// Connections is the number of connections (default 4).
	Connections int `json:"connections,omitempty"`
	// Inflight bounds the outstanding (pipelined) requests per connection (default 4). Through
	// a rate-limited sidecar proxy each pipelined request may wait up to the proxy's 1 s
	// throttle bound after the one before it, so keep Inflight seconds below Timeout there.
	Inflight int `json:"inflight,omitempty"`
	// WriteFraction is the share of accesses that SET the key instead of reading it (0..1).
	WriteFraction float64 `json:"writeFraction,omitempty"`
	// Start and Stop are offsets from the start of the run: the tenant's load runs in
	// [Start, Stop); Stop 0 means until the end.
	Start Duration `json:"start,omitempty"`
	Stop  Duration `json:"stop,omitempty"`
	// Seed of the tenant's workload; default: derived from Config.Seed and Name.
	Seed *uint64 `json:"seed,omitempty"`
}

// Defaults of the optional settings.
const (
	DefaultInterval    = 5 * time.Second
	DefaultTimeout     = 5 * time.Second
	DefaultConnections = 4
	DefaultInflight    = 4
)

// Engines.
const (
	EngineRedis     = "redis"
	EngineMemcached = "memcached"
)

// Files of a tenant's credentials Secret mounted as a directory (the keys the operator writes).
const (
	CredentialsUsernameFile = "username"
	CredentialsPasswordFile = "password"
	CredentialsEndpointFile = "endpoint"
)

// unixPrefix marks a unix socket address.
const unixPrefix = "unix:"

// Duration is a time.Duration written as a string such as "30s" or "2m" in configuration.
type Duration time.Duration

// UnmarshalJSON accepts a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration such as \"30s\" or \"2m\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as \"30s\" or \"2m\", got %q", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// LoadConfigFile reads a YAML or JSON configuration file. Unknown keys and values of the wrong
// type are errors naming the key (and the tenant).
func LoadConfigFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading the config file: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig parses a YAML or JSON configuration.
func ParseConfig(data []byte) (Config, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return Config{}, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		return Config{}, errors.New("want a mapping of settings and tenants at the top level")
	}
	tenantsJSON, hasTenants := top["tenants"]
	delete(top, "tenants")
	var cfg Config
	errs := decodeFields(top, &cfg, "")
	if hasTenants {
		var tenants []json.RawMessage
		if err := json.Unmarshal(tenantsJSON, &tenants); err != nil {
			errs = append(errs, errors.New("tenants: want a list of tenants"))
		}
		for i, raw := range tenants {
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
				errs = append(errs, fmt.Errorf("tenants[%d]: want a mapping of tenant fields", i))
				continue
			}
			var t TenantConfig
			var name string
			_ = json.Unmarshal(fields["name"], &name) // only to name the tenant in errors
			errs = append(errs, decodeFields(fields, &t, tenantLabel(i, name)+": ")...)
			cfg.Tenants = append(cfg.Tenants, t)
		}
	}
	return cfg, errors.Join(errs...)
}

// decodeFields decodes each field into dst on its own, so that every error names its field
// (encoding/json does not name the field when a custom unmarshaler fails).
func decodeFields(fields map[string]json.RawMessage, dst any, prefix string) []error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if err := decodeField(dst, name, fields[name]); err != nil {
			errs = append(errs, fmt.Errorf("%s%s: %s", prefix, name, describeJSONError(err, dst)))
		}
	}
	return errs
}

// decodeField decodes {name: value} into dst, refusing unknown names.
func decodeField(dst any, name string, value json.RawMessage) error {
	one, err := json.Marshal(map[string]json.RawMessage{name: value})
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(one))
	dec.DisallowUnknownFields()
	return dec.Decode(dst)
}

// describeJSONError rewords encoding/json's errors without Go type names.
func describeJSONError(err error, dst any) string {
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr):
		return fmt.Sprintf("want %s, got a %s", describeKind(typeErr.Type), typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return "unknown field (known: " + strings.Join(jsonFieldNames(reflect.TypeOf(dst).Elem()), ", ") + ")"
	}
	return err.Error()
}

func describeKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Uint64:
		return "a whole number"
	case reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list"
	case reflect.Pointer:
		return describeKind(t.Elem())
	}
	return t.Kind().String()
}

// jsonFieldNames lists the json names of t's fields.
func jsonFieldNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// ParseTenantFlag parses a tenant given on the command line as comma-separated key=value
// pairs with the keys of the configuration file. workload= must come last: it takes the rest
// of the string, since workload specs contain commas. Example:
//
//	name=team-a/orders,engine=redis,address=127.0.0.1:6379,rate=2000,workload=zipf:keys=100000,skew=0.99
func ParseTenantFlag(s string) (TenantConfig, error) {
	var t TenantConfig
	var errs []error
	for rest := s; rest != ""; {
		var item string
		if strings.HasPrefix(rest, "workload=") {
			item, rest = rest, ""
		} else {
			item, rest, _ = strings.Cut(rest, ",")
		}
		name, value, ok := strings.Cut(item, "=")
		if !ok {
			errs = append(errs, fmt.Errorf("%q: want key=value", item))
			continue
		}
		// A value that is a JSON number goes in as one; anything else (or a number where a
		// string is wanted, such as a numeric password) as a string.
		if _, err := strconv.ParseFloat(value, 64); err == nil {
			if decodeField(&t, name, json.RawMessage(value)) == nil {
				continue
			}
		}
		raw, _ := json.Marshal(value) // a string always marshals
		if err := decodeField(&t, name, raw); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s", name, describeJSONError(err, &t)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return TenantConfig{}, fmt.Errorf("tenant %q: %w", s, err)
	}
	return t, nil
}

// tenantLabel names a tenant in errors: by name when it has one, else by position.
func tenantLabel(i int, name string) string {
	if name != "" {
		return fmt.Sprintf("tenant %q", name)
	}
	return fmt.Sprintf("tenants[%d]", i)
}
