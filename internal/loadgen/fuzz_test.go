package loadgen

import (
	"strings"
	"testing"
)

// FuzzParseTenantFlag: any string gives a tenant or an error naming what is wrong, never a
// panic, and whatever parses also validates without panicking.
func FuzzParseTenantFlag(f *testing.F) {
	for _, s := range []string{
		"name=a/b,engine=redis,address=127.0.0.1:6379,rate=2000,workload=zipf:keys=100000,skew=0.99",
		"name=a/b,engine=memcached,address=unix:/s,password=1,seed=3,start=1s,stop=2s,workload=phase:1@loop:keys=2;1@scan:keys=1",
		"rate=1e400,connections=9999999999999999999",
		"workload=",
		"=,=,",
		"name",
		"writeFraction=NaN",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tc, err := ParseTenantFlag(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tenant ") {
				t.Errorf("error %q does not name the tenant", err)
			}
			return
		}
		_ = Config{Tenants: []TenantConfig{tc}}.Validate()
	})
}

// FuzzParseConfig: any bytes give a configuration or an error, never a panic.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"interval: 1s\ntenants:\n- {name: a/b, engine: redis, address: 'h:1', workload: 'scan:keys=1'}\n",
		`{"tenants": [{"name": "a/b", "rate": "x"}], "seed": -1}`,
		"tenants: [[1], {}, null, {name: {a: b}}]",
		"- 1",
		"",
		"duration: 1e9999",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err == nil {
			_ = cfg.Validate()
		}
	})
}
