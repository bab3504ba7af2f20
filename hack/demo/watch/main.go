// Command watch is the live part of `make demo`: every few seconds it prints
// `kubectl get tenantslo -A` and records each tenant's observed hit ratio, p99 latency and SLO
// verdict; at the end it writes them as a CSV and a PNG chart of each tenant's hit ratio vs its
// target over time, and prints a summary. It stops after --minutes, or once every tenant's SLO
// has held for --settle.
package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cacheqos/cacheqos/internal/plot"
)

// tenantSLO is the part of a TenantSLO the demo reads.
type tenantSLO struct {
	Metadata struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Class     string `json:"class"`
		Objective struct {
			HitRatio *struct {
				Target string `json:"target"`
			} `json:"hitRatio"`
			Latency *struct {
				Target string `json:"target"`
			} `json:"latency"`
			MaxDegradation *struct {
				Target string `json:"target"`
			} `json:"maxDegradation"`
		} `json:"objective"`
	} `json:"spec"`
	Status struct {
		Allocation *struct {
			Memory string `json:"memory"`
		} `json:"allocation"`
		Observed *struct {
			HitRatio   string `json:"hitRatio"`
			P99Latency string `json:"p99Latency"`
		} `json:"observed"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Reason string `json:"reason"`
		} `json:"conditions"`
	} `json:"status"`
}

func (s *tenantSLO) id() string { return s.Metadata.Namespace + "/" + s.Metadata.Name }

// objective describes the tenant's target for humans.
func (s *tenantSLO) objective() string {
	o := s.Spec.Objective
	switch {
	case o.HitRatio != nil:
		return "hit ratio >= " + o.HitRatio.Target
	case o.Latency != nil:
		return "p99 <= " + o.Latency.Target
	case o.MaxDegradation != nil:
		return "degradation <= " + o.MaxDegradation.Target + "x"
	}
	return "none"
}

// shortObjective fits the chart's legend.
func (s *tenantSLO) shortObjective() string {
	return strings.NewReplacer("hit ratio ", "", "degradation ", "", " ", "").Replace(s.objective())
}

func (s *tenantSLO) condition(kind string) (status, reason string) {
	for _, c := range s.Status.Conditions {
		if c.Type == kind {
			return c.Status, c.Reason
		}
	}
	return "Unknown", ""
}

// sample is one observation of one tenant.
type sample struct {
	at       time.Duration // since the watch started
	hitRatio float64       // NaN when not observed yet
	p99      string
	memory   string
	met      bool
	reason   string
}

type history struct {
	order     []string
	tenants   map[string]*tenantSLO
	samples   map[string][]sample
	firstMet  map[string]time.Duration
	metSince  map[string]time.Duration // start of the current run of met samples, or -1
	startedAt time.Time
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the demo cluster")
	kubectl := flag.String("kubectl", "kubectl", "kubectl binary")
	minutes := flag.Float64("minutes", 8, "watch at most this long")
	every := flag.Duration("every", 10*time.Second, "time between two looks")
	settle := flag.Duration("settle", time.Minute, "stop once every SLO has held this long")
	out := flag.String("out", "_demo", "folder for tenants.csv and hit-ratio.png")
	flag.Parse()
	if err := run(*kubeconfig, *kubectl, time.Duration(*minutes*float64(time.Minute)), *every, *settle, *out); err != nil {
		fmt.Fprintln(os.Stderr, "watch:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, kubectl string, limit, every, settle time.Duration, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	kube := func(args ...string) ([]byte, error) {
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
		}
		return b, nil
	}
	h := newHistory()
	interrupted := make(chan os.Signal, 1)
	signal.Notify(interrupted, os.Interrupt, syscall.SIGTERM)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		table, err := kube("get", "tenantslo", "-A")
		if err != nil {
			return err
		}
		list, err := kube("get", "tenantslo", "-A", "-o", "json")
		if err != nil {
			return err
		}
		if err := h.record(list); err != nil {
			return err
		}
		fmt.Printf("\n--- %s (after %s) ---\n%s", time.Now().Format("15:04:05"), h.elapsed(), table)
		if h.settled(settle) {
			fmt.Printf("\nevery SLO has held for %s\n", settle)
			break
		}
		if time.Since(h.startedAt) >= limit {
			fmt.Printf("\nstopped after %s\n", limit)
			break
		}
		select {
		case <-tick.C:
		case <-interrupted:
			fmt.Println("\ninterrupted")
			return h.report(out)
		}
	}
	return h.report(out)
}

func newHistory() *history {
	return &history{tenants: map[string]*tenantSLO{}, samples: map[string][]sample{}, firstMet: map[string]time.Duration{},
		metSince: map[string]time.Duration{}, startedAt: time.Now()}
}

func (h *history) elapsed() time.Duration { return time.Since(h.startedAt).Round(time.Second) }

func (h *history) record(list []byte) error {
	var items struct {
		Items []tenantSLO `json:"items"`
	}
	if err := json.Unmarshal(list, &items); err != nil {
		return fmt.Errorf("decoding the TenantSLO list: %w", err)
	}
	at := time.Since(h.startedAt)
	for i := range items.Items {
		s := &items.Items[i]
		id := s.id()
		if _, seen := h.tenants[id]; !seen {
			h.order = append(h.order, id)
			h.metSince[id] = -1
		}
		h.tenants[id] = s
		smp := sample{at: at, hitRatio: parseRatio(s)}
		if s.Status.Observed != nil {
			smp.p99 = s.Status.Observed.P99Latency
		}
		if s.Status.Allocation != nil {
			smp.memory = s.Status.Allocation.Memory
		}
		status, reason := s.condition("SLOMet")
		smp.met, smp.reason = status == "True", reason
		h.samples[id] = append(h.samples[id], smp)
		switch {
		case !smp.met:
			h.metSince[id] = -1
		case h.metSince[id] < 0:
			h.metSince[id] = at
			if _, ok := h.firstMet[id]; !ok {
				h.firstMet[id] = at
			}
		}
	}
	return nil
}

func parseRatio(s *tenantSLO) float64 {
	if s.Status.Observed == nil {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(s.Status.Observed.HitRatio, 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// settled reports whether every tenant has met its SLO for at least d.
func (h *history) settled(d time.Duration) bool {
	if len(h.order) == 0 {
		return false
	}
	now := time.Since(h.startedAt)
	for _, id := range h.order {
		if since := h.metSince[id]; since < 0 || now-since < d {
			return false
		}
	}
	return true
}

// report writes the CSV and the chart and prints the summary.
func (h *history) report(out string) error {
	csvPath, pngPath := filepath.Join(out, "tenants.csv"), filepath.Join(out, "hit-ratio.png")
	if err := h.writeCSV(csvPath); err != nil {
		return err
	}
	if err := h.writeChart(pngPath); err != nil {
		return err
	}
	fmt.Printf("\nSummary after %s:\n", h.elapsed())
	fmt.Printf("  %-24s %-22s %-9s %-10s %-9s %s\n", "TENANT", "OBJECTIVE", "HIT RATIO", "P99", "MEMORY", "SLO")
	allMet := true
	for _, id := range h.order {
		s, samples := h.tenants[id], h.samples[id]
		last := samples[len(samples)-1]
		verdict := "not met (" + last.reason + ")"
		if last.met {
			verdict = fmt.Sprintf("met, first after %s", h.firstMet[id].Round(time.Second))
		} else {
			allMet = false
		}
		ratio := "-"
		if !math.IsNaN(last.hitRatio) {
			ratio = strconv.FormatFloat(last.hitRatio, 'f', 3, 64)
		}
		fmt.Printf("  %-24s %-22s %-9s %-10s %-9s %s\n", id, s.objective(), ratio, last.p99, last.memory, verdict)
	}
	fmt.Printf("\nChart: %s\nData:  %s\n", pngPath, csvPath)
	if !allMet {
		return errors.New("some SLOs are not met (yet): the table above says why")
	}
	return nil
}

func (h *history) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"seconds", "tenant", "objective", "hit_ratio", "p99_latency", "memory", "slo_met", "reason"})
	for _, id := range h.order {
		for _, s := range h.samples[id] {
			ratio := ""
			if !math.IsNaN(s.hitRatio) {
				ratio = strconv.FormatFloat(s.hitRatio, 'f', 4, 64)
			}
			_ = w.Write([]string{strconv.FormatFloat(s.at.Seconds(), 'f', 0, 64), id, h.tenants[id].objective(),
				ratio, s.p99, s.memory, strconv.FormatBool(s.met), s.reason})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeChart plots every tenant's observed hit ratio over time, with its target as a dashed
// line when its objective is a hit ratio.
func (h *history) writeChart(path string) error {
	low, high := 0.0, 1.0
	chart := plot.Lines{Title: "cacheqos demo: observed hit ratio vs target", XLabel: "seconds", YLabel: "hit ratio", YMin: &low, YMax: &high}
	for _, id := range h.order {
		series := plot.Series{Name: id + " " + h.tenants[id].shortObjective()}
		for _, s := range h.samples[id] {
			if !math.IsNaN(s.hitRatio) {
				series.X = append(series.X, s.at.Seconds())
				series.Y = append(series.Y, s.hitRatio)
			}
		}
		if o := h.tenants[id].Spec.Objective.HitRatio; o != nil {
			if target, err := strconv.ParseFloat(o.Target, 64); err == nil {
				series.Target = &target
			}
		}
		chart.Series = append(chart.Series, series)
	}
	chart.Series = slices.DeleteFunc(chart.Series, func(s plot.Series) bool { return len(s.X) == 0 && s.Target == nil })
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := chart.WritePNG(f, 1000, 560); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
