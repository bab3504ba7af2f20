package loadgen

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// benchWindow is how long each throughput measurement runs.
const benchWindow = 3 * time.Second

// redisBenchmarkRate matches redis-benchmark -q's line for GET.
var redisBenchmarkRate = regexp.MustCompile(`GET: ([0-9.]+) requests per second`)

// BenchmarkMaxThroughput measures one load generator process sending as fast as it can to a
// redis-server on loopback TCP (a small key space, so nearly every access is one GET hit), and
// redis-benchmark's GET rate with the same connections and pipeline depth on the same server,
// and reports both and their ratio. Both share the machine's cores with redis-server.
func BenchmarkMaxThroughput(b *testing.B) {
	redisBenchmark, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Fatal("redis-benchmark is not installed: run `make bootstrap`")
	}
	for _, shape := range []struct{ connections, inflight int }{{1, 1}, {4, 1}, {4, 16}, {8, 32}} {
		b.Run(fmt.Sprintf("conns=%d/inflight=%d", shape.connections, shape.inflight), func(b *testing.B) {
			addr, _ := startRedisTCP(b)
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), benchWindow)
				res, err := Run(ctx, Config{Interval: Duration(time.Hour), Tenants: []TenantConfig{{
					Name: "bench/max", Engine: EngineRedis, Address: addr,
					Connections: shape.connections, Inflight: shape.inflight, Workload: "uniform:keys=1000,value=100",
				}}}, Env{})
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				loadgenRate := float64(res.Tenants[0].Ops) / res.Elapsed.Seconds()

				host, port, _ := net.SplitHostPort(addr)
				requests := max(int(loadgenRate*benchWindow.Seconds()), 10000)
				out, err := exec.Command(redisBenchmark, "-h", host, "-p", port, "-t", "get", "-q", "-d", "100", "-r", "1000",
					"-c", strconv.Itoa(shape.connections), "-P", strconv.Itoa(shape.inflight), "-n", strconv.Itoa(requests)).CombinedOutput()
				m := redisBenchmarkRate.FindSubmatch(out)
				if err != nil || m == nil {
					b.Fatalf("redis-benchmark: %v\n%s", err, out)
				}
				reference, _ := strconv.ParseFloat(string(m[1]), 64)
				b.ReportMetric(loadgenRate, "loadgen-ops/s")
				b.ReportMetric(reference, "redis-benchmark-GET/s")
				b.ReportMetric(loadgenRate/reference, "ratio")
				b.Logf("loadgen %.0f accesses/s (p50 %v, p99 %v), redis-benchmark %.0f GET/s: ratio %.2f",
					loadgenRate, res.Tenants[0].P50, res.Tenants[0].P99, reference, loadgenRate/reference)
			}
		})
	}
}
