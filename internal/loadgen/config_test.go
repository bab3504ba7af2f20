package loadgen

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
interval: 2s
duration: 1m
seed: 7
csv: out.csv
metricsListen: ":9390"
tenants:
- name: team-a/orders
  engine: redis
  address: 127.0.0.1:6379
  password: secret
  workload: "zipf:keys=1000,skew=0.9,value=10-100"
  rate: 1500
  connections: 3
  inflight: 4
  writeFraction: 0.1
  start: 10s
  stop: 50s
  seed: 3
- {name: team-b/batch, engine: memcached, address: "unix:/run/mc.sock", workload: "scan:keys=10"}
`))
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(3)
	want := Config{
		Interval: Duration(2 * time.Second), Duration: Duration(time.Minute), Seed: 7, CSV: "out.csv", MetricsListen: ":9390",
		Tenants: []TenantConfig{
			{
				Name: "team-a/orders", Engine: "redis", Address: "127.0.0.1:6379", Password: "secret",
				Workload: "zipf:keys=1000,skew=0.9,value=10-100", Rate: 1500, Connections: 3, Inflight: 4,
				WriteFraction: 0.1, Start: Duration(10 * time.Second), Stop: Duration(50 * time.Second), Seed: &seed,
			},
			{Name: "team-b/batch", Engine: "memcached", Address: "unix:/run/mc.sock", Workload: "scan:keys=10"},
		},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("parsed\n%+v\nwant\n%+v", cfg, want)
	}
	s, tenants, err := cfg.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if s.timeout != DefaultTimeout || s.interval != 2*time.Second {
		t.Errorf("settings %+v", s)
	}
	a, b := tenants[0], tenants[1]
	if a.user != "team-a/orders" || a.network != "tcp" || a.connections != 3 || a.seed != 3 {
		t.Errorf("tenant a: %+v", a)
	}
	if pw, _ := a.password(); pw != "secret" {
		t.Errorf("tenant a password %q", pw)
	}
	if b.network != "unix" || b.addr != "/run/mc.sock" || b.connections != DefaultConnections || b.inflight != DefaultInflight || b.user != "" {
		t.Errorf("tenant b: %+v", b)
	}
	if pw, _ := b.password(); pw != "" {
		t.Errorf("tenant b authenticates with %q, want no authentication", pw)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	emptyFile := filepath.Join(dir, "empty")
	writeTestFile(t, emptyFile, "")
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "no tenants",
			yaml: "interval: 1s",
			want: []string{"tenants: none given"},
		},
		{
			name: "unknown and mistyped fields name the tenant and the field",
			yaml: `tenants:
- {name: a/b, engine: redis, address: "h:1", workload: "uniform:keys=5", rat: 5, connections: many, start: 5}
- {engine: redis, address: "h:1", workload: "uniform:keys=5", stop: soon}`,
			want: []string{
				`tenant "a/b": rat: unknown field (known: name, engine, address`,
				`tenant "a/b": connections: want a whole number, got a string`,
				`tenant "a/b": start: want a duration such as "30s" or "2m", got 5`,
				`tenants[1]: stop: want a duration such as "30s" or "2m", got "soon"`,
			},
		},
		{
			name: "unknown top-level setting",
			yaml: "intervall: 1s\ntenants: []",
			want: []string{"intervall: unknown field (known: interval, duration, timeout"},
		},
		{
			name: "tenants not a list",
			yaml: "tenants: {name: a/b}",
			want: []string{"tenants: want a list of tenants"},
		},
		{
			name: "not a mapping",
			yaml: "- a\n- b",
			want: []string{"want a mapping of settings and tenants"},
		},
		{
			name: "bad values",
			yaml: `interval: -1s
tenants:
- name: Team_A
  engine: valkey
  address: nowhere
  workload: "zipf:keys=0"
  rate: -3
  connections: -1
  inflight: -2
  writeFraction: 1.5
  start: 5s
  stop: 2s
- name: a/b
  engine: redis
  workload: "loop:keys=5"
- {name: a/b, engine: memcached, address: "h:1", workload: "loop:keys=5"}
- engine: memcached
  address: "unix:"
  workload: "wave:keys=5"`,
			want: []string{
				"interval: -1s is negative",
				`tenant "Team_A": name: tenant ID "Team_A" is not <namespace>/<name>`,
				`tenant "Team_A": engine: "valkey" is neither redis nor memcached`,
				`tenant "Team_A": address: "nowhere" is not host:port or unix:/path/to.sock`,
				`tenant "Team_A": workload: workload spec "zipf:keys=0": Keys: zipf needs at least 1 key`,
				`tenant "Team_A": rate: -3 is not a finite number >= 0`,
				`tenant "Team_A": connections: -1 is negative`,
				`tenant "Team_A": inflight: -2 is negative`,
				`tenant "Team_A": writeFraction: 1.5 is not between 0 and 1`,
				`tenant "Team_A": stop: 2s is not after start 5s`,
				`tenant "a/b": address: missing (host:port, or unix:/path/to.sock)`,
				`tenant "a/b": name: given to more than one tenant`,
				`tenants[3]: name: missing`,
				`tenants[3]: address: "unix:" has no socket path`,
				`unknown shape "wave"`,
			},
		},
		{
			name: "start after the end of the run",
			yaml: "duration: 10s\ntenants: [{name: a/b, engine: redis, address: 'h:1', workload: 'scan:keys=1', start: 10s}]",
			want: []string{`tenant "a/b": start: 10s is not before the end of the run (duration 10s)`},
		},
		{
			name: "credentials",
			yaml: `tenants:
- {name: a/one, engine: redis, address: "h:1", workload: "scan:keys=1", password: x, passwordFile: /p}
- {name: a/two, engine: redis, address: "h:1", workload: "scan:keys=1", user: u}
- {name: a/three, engine: redis, address: "h:1", workload: "scan:keys=1", passwordFile: ` + filepath.Join(dir, "missing") + `}
- {name: a/four, engine: redis, address: "h:1", workload: "scan:keys=1", passwordFile: ` + emptyFile + `}
- {name: a/five, engine: redis, workload: "scan:keys=1", credentialsDir: ` + dir + `}`,
			want: []string{
				`tenant "a/one": password, passwordFile, credentialsDir: give at most one`,
				`tenant "a/two": user: given without a password`,
				`tenant "a/three": passwordFile: open ` + filepath.Join(dir, "missing") + `: no such file or directory`,
				`tenant "a/four": passwordFile: ` + emptyFile + ` is empty`,
				`tenant "a/five": credentialsDir: open ` + filepath.Join(dir, "password") + `: no such file or directory`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(tc.yaml))
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil {
				t.Fatalf("no error for\n%s", tc.yaml)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}

func TestLoadConfigFileJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	writeTestFile(t, path, `{"duration": "3s", "tenants": [{"name": "a/b", "engine": "redis", "address": "h:1", "workload": "loop:keys=9"}]}`)
	cfg, err := LoadConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Duration != Duration(3*time.Second) || len(cfg.Tenants) != 1 || cfg.Tenants[0].Workload != "loop:keys=9" {
		t.Errorf("config %+v", cfg)
	}
	if _, err := LoadConfigFile(filepath.Join(t.TempDir(), "absent.yaml")); err == nil || !strings.Contains(err.Error(), "reading the config file") {
		t.Errorf("missing file: %v", err)
	}
	writeTestFile(t, path, "tenants: [")
	if _, err := LoadConfigFile(path); err == nil || !strings.Contains(err.Error(), "config file "+path) {
		t.Errorf("malformed YAML: %v", err)
	}
}

// TestCredentialsDir reads a tenant's Secret mounted as files, as a pod mounts
// "<name>-cache-credentials"; the password file is read again at every connection.
func TestCredentialsDir(t *testing.T) {
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, CredentialsPasswordFile), "first")
	writeTestFile(t, filepath.Join(dir, CredentialsUsernameFile), "team-a/orders")
	writeTestFile(t, filepath.Join(dir, CredentialsEndpointFile), "orders-cache.cacheqos.svc:6379")
	cfg := Config{Tenants: []TenantConfig{{Name: "team-a/orders", Engine: "redis", Workload: "scan:keys=1", CredentialsDir: dir}}}
	_, tenants, err := cfg.resolve()
	if err != nil {
		t.Fatal(err)
	}
	tn := tenants[0]
	if tn.user != "team-a/orders" || tn.network != "tcp" || tn.addr != "orders-cache.cacheqos.svc:6379" {
		t.Errorf("tenant %+v", tn)
	}
	writeTestFile(t, filepath.Join(dir, CredentialsPasswordFile), "rotated\n")
	if pw, err := tn.password(); err != nil || pw != "rotated" {
		t.Errorf("password after rotation %q, %v", pw, err)
	}

	// An explicit address and user win over the Secret's.
	cfg.Tenants[0].Address, cfg.Tenants[0].User = "127.0.0.1:1", "someone"
	if _, tenants, err = cfg.resolve(); err != nil {
		t.Fatal(err)
	}
	if tenants[0].addr != "127.0.0.1:1" || tenants[0].user != "someone" {
		t.Errorf("tenant %+v", tenants[0])
	}
}

func TestParseTenantFlag(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    TenantConfig
		wantErr []string
	}{
		{
			in: "name=a/b,engine=redis,address=127.0.0.1:6379,rate=2000,connections=4,start=1m,workload=zipf:keys=100000,skew=0.99,value=100-4096",
			want: TenantConfig{Name: "a/b", Engine: "redis", Address: "127.0.0.1:6379", Rate: 2000, Connections: 4,
				Start: Duration(time.Minute), Workload: "zipf:keys=100000,skew=0.99,value=100-4096"},
		},
		{
			// A numeric password stays a string; a phase spec keeps its semicolons.
			in: "name=a/b,engine=memcached,address=h:1,password=12345,seed=9,workload=phase:10@loop:keys=5;10@scan:keys=5",
			want: TenantConfig{Name: "a/b", Engine: "memcached", Address: "h:1", Password: "12345",
				Workload: "phase:10@loop:keys=5;10@scan:keys=5"},
		},
		{
			in:      "name=a/b,rate=fast,conns=3,workload",
			wantErr: []string{`rate: want a number, got a string`, `conns: unknown field (known: name, engine`, `"workload": want key=value`},
		},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTenantFlag(tc.in)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error, got %+v", got)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error lacks %q:\n%v", want, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.Seed = nil // compared below
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	got, err := ParseTenantFlag("name=a/b,seed=9,workload=scan:keys=1")
	if err != nil || got.Seed == nil || *got.Seed != 9 {
		t.Errorf("seed: %+v, %v", got, err)
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
