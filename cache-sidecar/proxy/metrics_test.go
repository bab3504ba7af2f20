package proxy

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// scrape fetches and parses a node's /metrics.
func scrape(t *testing.T, n *testNode) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(n.http.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// tenantSeries returns a tenant's series: family name plus labels other than tenant -> value
// (histograms expand into their exposed series).
func tenantSeries(families map[string]*dto.MetricFamily, tenant string) map[string]float64 {
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.Metric {
			var labels []string
			isTenant := false
			for _, l := range m.Label {
				if l.GetName() == "tenant" {
					isTenant = l.GetValue() == tenant
					continue
				}
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			if !isTenant {
				continue
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				h := m.Histogram
				out[name+"_count"] = float64(h.GetSampleCount())
				out[name+"_sum"] = h.GetSampleSum()
				for _, b := range h.Bucket {
					out[fmt.Sprintf("%s_bucket{le=%g}", name, b.GetUpperBound())] = float64(b.GetCumulativeCount())
				}
				out[name+"_bucket{le=+Inf}"] = float64(h.GetSampleCount())
			}
		}
	}
	return out
}

// seriesBudget is the documented number of series per tenant-partition without forwarding.
const seriesBudget = 52

func TestMetricsPerTenant(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, _ := singleNode(t, Redis, acct, Options{})
	c := loginRESP(t, n, acct)
	const keys = 100
	var cmds [][]string
	for i := range keys {
		cmds = append(cmds, []string{"SET", "k" + strconv.Itoa(i), "value"})
	}
	for i := range 2 * keys { // half hits, half misses
		cmds = append(cmds, []string{"GET", "k" + strconv.Itoa(i)})
	}
	cmds = append(cmds, []string{"MGET", "k1", "k2", "nope"}, []string{"DEL", "k1"}, []string{"PING"})
	pipeline(c, cmds)

	series := tenantSeries(scrape(t, n), acct.id)
	checks := map[string]float64{
		"cacheqos_sidecar_requests_total{class=write}":    keys,
		"cacheqos_sidecar_requests_total{class=read}":     2*keys + 1,
		"cacheqos_sidecar_requests_total{class=delete}":   1,
		"cacheqos_sidecar_requests_total{class=other}":    1, // PING: AUTH came before the tenant was known
		"cacheqos_sidecar_hits_total{}":                   keys + 2,
		"cacheqos_sidecar_misses_total{}":                 keys + 1,
		"cacheqos_sidecar_served_requests_total{}":        3*keys + 2,
		"cacheqos_sidecar_connections{}":                  1,
		"cacheqos_sidecar_request_duration_seconds_count": 3*keys + 3,
		"cacheqos_sidecar_throttled_requests_total{}":     0,
		"cacheqos_sidecar_refused_requests_total{}":       0,
		"cacheqos_sidecar_auth_failures_total{}":          0,
	}
	for key, want := range checks {
		if got, ok := series[key]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
	}
	for _, key := range []string{"cacheqos_sidecar_bytes_in_total{}", "cacheqos_sidecar_bytes_out_total{}"} {
		if series[key] <= 0 {
			t.Errorf("%s = %v, want > 0", key, series[key])
		}
	}
	curve := 0
	for key, v := range series {
		if strings.HasPrefix(key, "cacheqos_sidecar_mrc_hit_ratio{") {
			curve++
			if v < 0 || v > 1 {
				t.Errorf("%s = %v outside [0, 1]", key, v)
			}
		}
	}
	if curve < DefaultMRCCurvePoints/2 || curve > DefaultMRCCurvePoints {
		t.Errorf("%d curve series, want about %d", curve, DefaultMRCCurvePoints)
	}
	if len(series) > seriesBudget {
		t.Errorf("%d series for the tenant, more than the documented %d:\n%v", len(series), seriesBudget, series)
	}
	t.Logf("%d series per tenant-partition", len(series))

	// The curve's own numbers: every key was written before it was read twice (100 keys read
	// after their write, 100 never written, and MGET's 2 hits and a miss), all sampled.
	for key, want := range map[string]float64{
		"cacheqos_sidecar_mrc_achieved_hit_ratio{}": float64(keys+2) / float64(2*keys+3),
		"cacheqos_sidecar_mrc_sampling_rate{}":      DefaultMRCSampleRate,
		"cacheqos_sidecar_evictions_total{}":        0,
	} {
		if got, ok := series[key]; !ok || math.Abs(got-want) > 0.01 {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
	}
	for _, key := range []string{"cacheqos_sidecar_mrc_predicted_hit_ratio{}", "cacheqos_sidecar_mrc_tracked_keys{}",
		"cacheqos_sidecar_mrc_sampled_accesses{}", "cacheqos_sidecar_mrc_footprint_bytes{}", "cacheqos_sidecar_engine_bytes_per_object{}"} {
		if _, ok := series[key]; !ok {
			t.Errorf("no %s", key)
		}
	}
}

func TestMetricsForwardedAndBudgetAcrossNodes(t *testing.T) {
	c := startCluster(t, Redis, 1, 1)
	via := loginRESP(t, c.a, c.acct)
	var cmds [][]string
	for i := range 200 {
		cmds = append(cmds, []string{"SET", "k" + strconv.Itoa(i), "v"})
	}
	pipeline(via, cmds)
	a, b := tenantSeries(scrape(t, c.a), c.acct.id), tenantSeries(scrape(t, c.b), c.acct.id)
	forwarded := a["cacheqos_sidecar_forwarded_requests_total{peer=node-b}"]
	servedB := b["cacheqos_sidecar_served_requests_total{}"]
	if forwarded < 50 || forwarded != servedB {
		t.Errorf("node a forwarded %v requests, node b served %v; want equal and about half of 200", forwarded, servedB)
	}
	if got := a["cacheqos_sidecar_served_requests_total{}"] + servedB; got != 200 {
		t.Errorf("served on both nodes: %v, want 200", got)
	}
	if len(a) > seriesBudget+1 || len(b) > seriesBudget+1 {
		t.Errorf("series per tenant: node a %d, node b %d; budget %d + 1 peer", len(a), len(b), seriesBudget)
	}
	// Node b measured the partition but saw no client: its requests counters stay zero.
	if got := b["cacheqos_sidecar_requests_total{class=write}"]; got != 0 {
		t.Errorf("node b counts %v client writes, want 0 (peer requests count where the client is)", got)
	}
}

func TestAuthFailuresOfUnknownUsersShareOneSeries(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, _ := singleNode(t, Redis, acct, Options{MaxAuthFailures: 100})
	c := dialRESP(t, "tcp", n.addr)
	for i := range 5 {
		c.do("AUTH", "attacker/"+strconv.Itoa(i), "x")
	}
	c.do("AUTH", acct.id, "wrong")
	families := scrape(t, n)
	if got := tenantSeries(families, unknownTenant)["cacheqos_sidecar_auth_failures_total{}"]; got != 5 {
		t.Errorf("unknown-tenant auth failures %v, want 5", got)
	}
	if got := tenantSeries(families, acct.id)["cacheqos_sidecar_auth_failures_total{}"]; got != 1 {
		t.Errorf("tenant auth failures %v, want 1", got)
	}
	for i := range 5 {
		if s := tenantSeries(families, "attacker/"+strconv.Itoa(i)); len(s) != 0 {
			t.Errorf("series for a claimed user name: %v", s)
		}
	}
}

func TestGhostHitsFollowEvictions(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		acct := newAccount(t, "team-a/cache")
		engine := startEngine(t, Redis, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
		n := startNode(t, "node-a", Options{Protocol: Redis})
		n.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, Routes: []Route{n.route(1)}})
		direct := dialRESP(t, "unix", engine)
		waitFor(t, "the eviction watcher to subscribe", func() bool {
			return direct.do("PUBSUB", "NUMSUB", evictedChannel) == "*2\r\n$22\r\n"+evictedChannel+"\r\n:1\r\n"
		})
		c := loginRESP(t, n, acct)
		value := strings.Repeat("x", 4096)
		var cmds [][]string
		for i := range 3000 {
			cmds = append(cmds, []string{"SET", "k" + strconv.Itoa(i), value})
		}
		pipeline(c, cmds)
		expectScrapedEvictions(t, n, acct, func() (evicted string) {
			for _, line := range strings.Split(direct.do("INFO", "stats"), "\r\n") {
				if v, ok := strings.CutPrefix(line, "evicted_keys:"); ok {
					evicted = v
				}
			}
			return evicted
		})
		expectGhostHits(t, n, acct, func() {
			var gets [][]string
			for i := range 300 {
				gets = append(gets, []string{"GET", "k" + strconv.Itoa(i)})
			}
			pipeline(c, gets)
		})
	})
	t.Run("memcached", func(t *testing.T) {
		acct := newAccount(t, "team-a/cache")
		engine := startEngine(t, Memcached, "-m", "2")
		n := startNode(t, "node-a", Options{Protocol: Memcached})
		n.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: engine, Routes: []Route{n.route(1)}})
		direct := dialMC(t, "unix", engine)
		waitFor(t, "the eviction watcher to connect", func() bool {
			direct.write("stats\r\n")
			watching := false
			for line := direct.line(); line != "END"; line = direct.line() {
				watching = watching || line == "STAT log_watchers 1"
			}
			return watching
		})
		c := loginMC(t, n, acct)
		value := strings.Repeat("x", 30000)
		var batch strings.Builder
		for i := range 300 {
			fmt.Fprintf(&batch, "set k%d 0 0 %d noreply\r\n%s\r\n", i, len(value), value)
		}
		c.write(batch.String() + "mn\r\n")
		if got := c.line(); got != "MN" {
			t.Fatalf("after the sets: %q", got)
		}
		expectScrapedEvictions(t, n, acct, func() (evicted string) {
			direct.write("stats\r\n")
			for line := direct.line(); line != "END"; line = direct.line() {
				if v, ok := strings.CutPrefix(line, "STAT evictions "); ok {
					evicted = v
				}
			}
			return evicted
		})
		expectGhostHits(t, n, acct, func() {
			for i := range 30 {
				c.get("k" + strconv.Itoa(i))
			}
		})
	})
}

// expectScrapedEvictions checks that a scrape's evictions_total lies between the counts the
// engine itself gives (engineCount: as its stats print it) just before and just after, and
// that the engine evicted: the sidecar reads the engine at scrape time rather than a
// periodically refreshed copy. (Redis may evict a few more keys meanwhile: the scrape's own
// connection to it takes memory.)
func expectScrapedEvictions(t *testing.T, n *testNode, acct account, engineCount func() string) {
	t.Helper()
	count := func() float64 {
		v, err := strconv.ParseFloat(engineCount(), 64)
		if err != nil {
			t.Fatalf("the engine's eviction count: %v", err)
		}
		return v
	}
	before := count()
	got := tenantSeries(scrape(t, n), acct.id)["cacheqos_sidecar_evictions_total{}"]
	after := count()
	if before == 0 {
		t.Fatal("the engine evicted nothing")
	}
	if got < before || got > after {
		t.Errorf("evictions_total %v at scrape time, the engine %v before and %v after", got, before, after)
	}
}

// expectGhostHits reads evicted keys until the ghost list (fed asynchronously) counts hits.
func expectGhostHits(t *testing.T, n *testNode, acct account, readEvicted func()) {
	t.Helper()
	tenant := n.p.lookupTenant([]byte(acct.id))
	waitFor(t, "ghost hits", func() bool {
		readEvicted()
		return tenant.stats.ghostHits.Load() > 0
	})
	series := tenantSeries(scrape(t, n), acct.id)
	if series["cacheqos_sidecar_ghost_hits_total{}"] == 0 || series["cacheqos_sidecar_misses_total{}"] == 0 {
		t.Fatalf("ghost hits %v, misses %v", series["cacheqos_sidecar_ghost_hits_total{}"], series["cacheqos_sidecar_misses_total{}"])
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	get := func(n *testNode, path string) (int, string) {
		res, err := http.Get(n.http.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	n := startNode(t, "node-a", Options{Protocol: Redis})
	if code, _ := get(n, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	waitFor(t, "listeners", func() bool { return n.p.clientListeners.Load() == 2 && n.p.peerListeners.Load() == 1 })
	if code, body := get(n, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no tenant table") {
		t.Fatalf("/readyz before Update: %d %q", code, body)
	}
	acct := newAccount(t, "team-a/cache")
	n.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: startEngine(t, Redis), Routes: []Route{n.route(1)}})
	if code, body := get(n, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	n.update(t, Tenant{ID: acct.id, CredentialHash: acct.hash, LocalEngine: t.TempDir() + "/gone.sock", Routes: []Route{n.route(1)}})
	if code, body := get(n, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, acct.id) {
		t.Fatalf("/readyz with a dead engine: %d %q", code, body)
	}
}

// TestCurveSettings: the miss-ratio curve options shape what the tracker does: its starting
// rate, its bound on tracked keys (which lowers the rate), and the number of curve series.
func TestCurveSettings(t *testing.T) {
	acct := newAccount(t, "team-a/cache")
	n, _ := singleNode(t, Redis, acct, Options{MRCSampleRate: 0.5, MRCMaxTrackedKeys: 100, MRCCurvePoints: 5})
	c := loginRESP(t, n, acct)
	before := tenantSeries(scrape(t, n), acct.id)
	if got := before["cacheqos_sidecar_mrc_sampling_rate{}"]; got != 0.5 {
		t.Errorf("sampling rate %v before any access, want 0.5", got)
	}
	var cmds [][]string
	for i := range 2000 {
		cmds = append(cmds, []string{"GET", "k" + strconv.Itoa(i)}, []string{"SET", "k" + strconv.Itoa(i), "value"})
	}
	pipeline(c, cmds)
	series := tenantSeries(scrape(t, n), acct.id)
	if got := series["cacheqos_sidecar_mrc_tracked_keys{}"]; got > 100 || got < 50 {
		t.Errorf("%v keys tracked, want at most 100 (and most of them)", got)
	}
	if got := series["cacheqos_sidecar_mrc_sampling_rate{}"]; got >= 0.1 {
		t.Errorf("sampling rate %v after 2000 keys with room for 100, want it lowered below 0.1", got)
	}
	curve := 0
	for key := range series {
		if strings.HasPrefix(key, "cacheqos_sidecar_mrc_hit_ratio{") {
			curve++
		}
	}
	if curve < 3 || curve > 5 {
		t.Errorf("%d curve series, want 3 to 5", curve)
	}
}
