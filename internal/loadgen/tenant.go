package loadgen

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cacheqos/cacheqos/internal/credentials"
	"github.com/cacheqos/cacheqos/internal/keyhash"
	"github.com/cacheqos/cacheqos/internal/workload"
)

// settings are a validated Config's run-wide settings, defaults applied.
type settings struct {
	interval, duration, timeout time.Duration
	csv                         string
}

// tenant is a validated TenantConfig, ready to run.
type tenant struct {
	id            string
	engine        string
	network, addr string
	user          string
	// password returns the password to authenticate with ("" : do not authenticate), read
	// again from its file each time.
	password      func() (string, error)
	spec          workload.Spec
	seed          uint64
	rate          float64
	connections   int
	inflight      int
	writeFraction float64
	start, stop   time.Duration // stop 0: until the end of the run
}

// Validate checks the configuration (reading the credential files it names) and reports
// every problem, each naming its tenant and field.
func (c Config) Validate() error {
	_, _, err := c.resolve()
	return err
}

func (c Config) resolve() (settings, []*tenant, error) {
	var errs []error
	s := settings{
		interval: orDefault(time.Duration(c.Interval), DefaultInterval),
		duration: time.Duration(c.Duration),
		timeout:  orDefault(time.Duration(c.Timeout), DefaultTimeout),
		csv:      c.CSV,
	}
	for _, d := range []struct {
		name  string
		value Duration
	}{{"interval", c.Interval}, {"duration", c.Duration}, {"timeout", c.Timeout}} {
		if d.value < 0 {
			errs = append(errs, fmt.Errorf("%s: %v is negative", d.name, time.Duration(d.value)))
		}
	}
	if len(c.Tenants) == 0 {
		errs = append(errs, errors.New("tenants: none given (a config file's tenants list, or --tenant)"))
	}
	tenants := make([]*tenant, 0, len(c.Tenants))
	seen := map[string]bool{}
	for i, tc := range c.Tenants {
		label := tenantLabel(i, tc.Name)
		if tc.Name != "" && seen[tc.Name] {
			errs = append(errs, fmt.Errorf("%s: name: given to more than one tenant", label))
		}
		seen[tc.Name] = true
		t, terrs := tc.resolve(s, c.Seed)
		for _, err := range terrs {
			errs = append(errs, fmt.Errorf("%s: %w", label, err))
		}
		tenants = append(tenants, t)
	}
	if err := errors.Join(errs...); err != nil {
		return settings{}, nil, err
	}
	return s, tenants, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// resolve validates one tenant; every error names its field.
func (tc TenantConfig) resolve(s settings, runSeed uint64) (*tenant, []error) {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	t := &tenant{
		id:            tc.Name,
		engine:        tc.Engine,
		rate:          tc.Rate,
		connections:   tc.Connections,
		inflight:      tc.Inflight,
		writeFraction: tc.WriteFraction,
		start:         time.Duration(tc.Start),
		stop:          time.Duration(tc.Stop),
	}
	if tc.Name == "" {
		fail("name", "missing (the tenant ID, <namespace>/<name>)")
	} else if _, _, err := credentials.SplitTenantID(tc.Name); err != nil {
		fail("name", "%s", strings.TrimPrefix(err.Error(), "credentials: "))
	}
	switch tc.Engine {
	case EngineRedis, EngineMemcached:
	case "":
		fail("engine", "missing (redis or memcached)")
	default:
		fail("engine", "%q is neither redis nor memcached", tc.Engine)
	}

	endpoint, err := tc.resolveCredentials(t)
	if err != nil {
		errs = append(errs, err)
	}
	address := tc.Address
	if address == "" {
		address = endpoint
	}
	if t.network, t.addr, err = parseAddress(address); err != nil {
		if address == "" && tc.CredentialsDir != "" {
			fail("address", "missing, and credentialsDir %s has no %s file", tc.CredentialsDir, CredentialsEndpointFile)
		} else {
			fail("address", "%v", err)
		}
	}

	if tc.Workload == "" {
		fail("workload", "missing (a workload spec such as \"zipf:keys=100000,skew=0.99,value=100-4096\")")
	} else if t.spec, err = workload.ParseSpec(tc.Workload); err != nil {
		fail("workload", "%v", err)
	}
	if tc.Rate < 0 || math.IsNaN(tc.Rate) || math.IsInf(tc.Rate, 0) {
		fail("rate", "%v is not a finite number >= 0 (accesses per second; 0: as fast as possible)", tc.Rate)
	}
	for _, f := range []struct {
		name       string
		value, def int
		p          *int
	}{{"connections", tc.Connections, DefaultConnections, &t.connections}, {"inflight", tc.Inflight, DefaultInflight, &t.inflight}} {
		switch {
		case f.value < 0:
			fail(f.name, "%d is negative", f.value)
		case f.value == 0:
			*f.p = f.def
		}
	}
	if !(tc.WriteFraction >= 0 && tc.WriteFraction <= 1) {
		fail("writeFraction", "%v is not between 0 and 1", tc.WriteFraction)
	}
	switch {
	case t.start < 0:
		fail("start", "%v is negative", t.start)
	case s.duration > 0 && t.start >= s.duration:
		fail("start", "%v is not before the end of the run (duration %v)", t.start, s.duration)
	}
	switch {
	case t.stop < 0:
		fail("stop", "%v is negative", t.stop)
	case t.stop > 0 && t.stop <= t.start:
		fail("stop", "%v is not after start %v", t.stop, t.start)
	}
	if tc.Seed != nil {
		t.seed = *tc.Seed
	} else {
		t.seed = keyhash.Derive(runSeed, keyhash.Salt(tc.Name))
	}
	return t, errs
}

// resolveCredentials sets t.user and t.password from the tenant's password source and returns
// the endpoint of its credentials directory, if any.
func (tc TenantConfig) resolveCredentials(t *tenant) (endpoint string, err error) {
	sources := 0
	for _, s := range []string{tc.Password, tc.PasswordFile, tc.CredentialsDir} {
		if s != "" {
			sources++
		}
	}
	if sources > 1 {
		return "", errors.New("password, passwordFile, credentialsDir: give at most one")
	}
	t.user = tc.User
	switch {
	case tc.Password != "":
		password := tc.Password
		t.password = func() (string, error) { return password, nil }
	case tc.PasswordFile != "":
		if _, err := readSecretFile(tc.PasswordFile); err != nil {
			return "", fmt.Errorf("passwordFile: %w", err)
		}
		t.password = func() (string, error) { return readSecretFile(tc.PasswordFile) }
	case tc.CredentialsDir != "":
		path := filepath.Join(tc.CredentialsDir, CredentialsPasswordFile)
		if _, err := readSecretFile(path); err != nil {
			return "", fmt.Errorf("credentialsDir: %w", err)
		}
		t.password = func() (string, error) { return readSecretFile(path) }
		if t.user == "" {
			if t.user, err = readOptionalFile(filepath.Join(tc.CredentialsDir, CredentialsUsernameFile)); err != nil {
				return "", fmt.Errorf("credentialsDir: %w", err)
			}
		}
		if endpoint, err = readOptionalFile(filepath.Join(tc.CredentialsDir, CredentialsEndpointFile)); err != nil {
			return "", fmt.Errorf("credentialsDir: %w", err)
		}
	default:
		if tc.User != "" {
			return "", errors.New("user: given without a password (password, passwordFile or credentialsDir)")
		}
		t.password = func() (string, error) { return "", nil }
		return "", nil
	}
	if t.user == "" {
		t.user = tc.Name
	}
	return endpoint, nil
}

// readSecretFile reads a non-empty one-line secret; a trailing newline (files written by hand
// have one, Secret volumes do not) is not part of it.
func readSecretFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimRight(string(data), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// readOptionalFile is readSecretFile for a file that may be absent ("" then).
func readOptionalFile(path string) (string, error) {
	s, err := readSecretFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return s, err
}

// parseAddress splits "unix:/path" or "host:port" into a network and an address for net.Dial.
func parseAddress(s string) (network, addr string, err error) {
	if path, ok := strings.CutPrefix(s, unixPrefix); ok {
		if path == "" {
			return "", "", fmt.Errorf("%q has no socket path after %q", s, unixPrefix)
		}
		return "unix", path, nil
	}
	if s == "" {
		return "", "", errors.New("missing (host:port, or unix:/path/to.sock)")
	}
	if _, port, err := net.SplitHostPort(s); err != nil || port == "" {
		return "", "", fmt.Errorf("%q is not host:port or unix:/path/to.sock", s)
	}
	return "tcp", s, nil
}
