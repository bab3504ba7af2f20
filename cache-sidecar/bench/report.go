package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// The targets of the sidecar issue.
const (
	// Unpipelined, the proxy keeps at least this share of direct throughput ...
	minUnpipelinedShare = 0.95
	// ... and adds at most this much to the median latency (milliseconds).
	maxAddedP50 = 0.2
	// Pipelined, the proxy's throughput is at least twemproxy's (the aim is 1.5x).
	minPipelinedVsTwemproxy = 1.0
	aimPipelinedVsTwemproxy = 1.5
)

func printReports(w io.Writer, cfg *config, reports []engineReport) {
	var verdicts []string
	for _, rep := range reports {
		for _, l := range cfg.loads {
			byTarget := rep.results[l.name]
			fmt.Fprintf(w, "\n== %s, %s: %d connections, pipeline %d, %d requests per test, %d-byte values, %d keys, tenant limits %s, sidecar GOMAXPROCS %s, median of %d rounds\n",
				rep.engine, l.name, l.clients, l.pipeline, l.requests, valueSize, keyspace, onOff(cfg.limits), procs(cfg.sidecarProcs), cfg.rounds)
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "test\ttarget\tops/s\tp50 ms\tp99 ms\t")
			for i, test := range byTarget[targetDirect] {
				for _, target := range targets {
					r := byTarget[target][i]
					fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.3f\t%.3f\t\n", test.Test, target, r.RPS, r.P50, r.P99)
				}
			}
			tw.Flush()
			tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "test\tratio\tops/s\tp50\tp99\t")
			for i, test := range byTarget[targetDirect] {
				direct, ours, twem := byTarget[targetDirect][i], byTarget[targetSidecar][i], byTarget[targetTwemproxy][i]
				for _, pair := range []struct {
					name string
					a, b result
				}{
					{targetSidecar + "/" + targetDirect, ours, direct},
					{targetTwemproxy + "/" + targetDirect, twem, direct},
					{targetSidecar + "/" + targetTwemproxy, ours, twem},
				} {
					fmt.Fprintf(tw, "%s\t%s\t%.2fx\t%.2fx\t%.2fx\t\n", test.Test, pair.name,
						ratio(pair.a.RPS, pair.b.RPS), ratio(pair.a.P50, pair.b.P50), ratio(pair.a.P99, pair.b.P99))
				}
				fmt.Fprintf(tw, "%s\tadded p50 (%s - %s)\t\t%+.3f ms\t\t\n", test.Test, targetSidecar, targetDirect, ours.P50-direct.P50)
				verdicts = append(verdicts, verdict(rep.engine, l, test.Test, direct, ours, twem, rep.cpu[l.name]))
			}
			tw.Flush()
			printCPU(w, rep.cpu[l.name])
			cpu := rep.cpu[l.name]
			fmt.Fprintf(w, "  bound: a proxy spending only the null hop's %.2f us per request, in front of an engine batched as well as the\n"+
				"         better proxy here managed (%.2f us), would reach at most %.2fx direct while the cores are saturated (direct: %.0f%% busy)\n",
				cpu[targetNullHop].Proxy, batchedEngineCPU(cpu), boundShare(cpu), 100*cpu[targetDirect].Busy)
		}
	}
	fmt.Fprintln(w, "\n== targets")
	for _, v := range verdicts {
		fmt.Fprintln(w, v)
	}
}

// boundShare is the largest share of the direct engine's throughput a proxy can keep when the
// machine's cores are saturated, throughput then being inversely proportional to the CPU the
// machine spends per request: the proxy costs at least the null hop's CPU, and the engine
// behind it at least what it cost behind the better-batching of the two proxies measured.
// Everything else the machine spends per request (the load generator, the kernel's share)
// stays as with the direct engine. The proxy's own engine-side system calls are left out, so
// the bound is generous.
func boundShare(cpu map[string]cpuUse) float64 {
	direct := cpu[targetDirect]
	return ratio(direct.Machine, direct.Machine-direct.Engine+batchedEngineCPU(cpu)+cpu[targetNullHop].Proxy)
}

// batchedEngineCPU is the least CPU per request the engine spent behind a proxy.
func batchedEngineCPU(cpu map[string]cpuUse) float64 {
	return min(cpu[targetSidecar].Engine, cpu[targetTwemproxy].Engine)
}

func verdict(engine string, l load, test string, direct, ours, twem result, cpu map[string]cpuUse) string {
	prefix := fmt.Sprintf("%s %s %s:", engine, l.name, test)
	if l.pipeline == 1 {
		share, added := ratio(ours.RPS, direct.RPS), ours.P50-direct.P50
		return fmt.Sprintf("%s %s/%s ops %.2fx (target >= %.2fx; bound for any proxy here %.2fx) %s; added p50 %.3f ms (target <= %.1f ms) %s",
			prefix, targetSidecar, targetDirect, share, minUnpipelinedShare, boundShare(cpu), met(share >= minUnpipelinedShare),
			added, maxAddedP50, met(added <= maxAddedP50))
	}
	vsTwem := ratio(ours.RPS, twem.RPS)
	return fmt.Sprintf("%s %s/%s ops %.2fx (target >= %.1fx, aim %.1fx) %s", prefix, targetSidecar, targetTwemproxy,
		vsTwem, minPipelinedVsTwemproxy, aimPipelinedVsTwemproxy, met(vsTwem >= minPipelinedVsTwemproxy))
}

func met(ok bool) string {
	if ok {
		return "MET"
	}
	return "MISSED"
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// procs describes the sidecar's GOMAXPROCS setting.
func procs(n int) string {
	if n == 0 {
		return "default"
	}
	return fmt.Sprint(n)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// printCPU prints the CPU each target's processes, the load generator and the whole machine
// spent per request, and how busy the machine's cores were.
func printCPU(w io.Writer, byTarget map[string]cpuUse) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "CPU per request\tengine us\tproxy us\ttotal us\tvs direct\tload gen us\tmachine us\tcores busy\t")
	direct := byTarget[targetDirect].total()
	for _, target := range targets {
		u := byTarget[target]
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2fx\t%.2f\t%.2f\t%.0f%%\t\n",
			target, u.Engine, u.Proxy, u.total(), ratio(u.total(), direct), u.Load, u.Machine, 100*u.Busy)
	}
	tw.Flush()
}
