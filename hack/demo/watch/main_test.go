package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// list renders a TenantSLO list as kubectl -o json prints it: catalog with a hit-ratio target,
// queries with a latency target; met says whose SLOMet condition is True.
func list(catalogRatio string, met map[string]bool) []byte {
	item := func(ns, name, objective, ratio string, met bool) string {
		status := "False"
		reason := "TargetMissed"
		if met {
			status, reason = "True", "TargetMet"
		}
		return fmt.Sprintf(`{"metadata":{"namespace":%q,"name":%q},"spec":{"objective":%s},
			"status":{"allocation":{"memory":"32Mi"},"observed":{"hitRatio":%q,"p99Latency":"2ms"},
			"conditions":[{"type":"SLOMet","status":%q,"reason":%q}]}}`, ns, name, objective, ratio, status, reason)
	}
	return []byte(`{"items":[` +
		item("shop", "catalog", `{"hitRatio":{"target":"0.7"}}`, catalogRatio, met["catalog"]) + "," +
		item("search", "queries", `{"latency":{"target":"50ms"}}`, "0.5", met["queries"]) + `]}`)
}

func TestHistorySettlesOnlyWhenEverySLOHeld(t *testing.T) {
	h := newHistory()
	steps := []struct {
		ratio   string
		met     map[string]bool
		settled bool
	}{
		{"0.2", map[string]bool{"queries": true}, false},
		{"0.75", map[string]bool{"catalog": true, "queries": true}, true}, // settle 0: held since now
		{"0.65", map[string]bool{"queries": true}, false},                 // a miss resets the run
	}
	for i, s := range steps {
		if err := h.record(list(s.ratio, s.met)); err != nil {
			t.Fatal(err)
		}
		if got := h.settled(0); got != s.settled {
			t.Errorf("step %d: settled = %v, want %v", i, got, s.settled)
		}
		if h.settled(time.Hour) {
			t.Errorf("step %d: settled for an hour after a moment", i)
		}
	}
	if _, ok := h.firstMet["shop/catalog"]; !ok {
		t.Error("catalog's first met time was not recorded")
	}

	out := t.TempDir()
	err := h.report(out)
	if err == nil || !strings.Contains(err.Error(), "not met") {
		t.Errorf("report of a history ending in a miss: %v, want an error saying so", err)
	}
	data, err := os.ReadFile(filepath.Join(out, "tenants.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+2*len(steps) || rows[1][1] != "shop/catalog" || rows[1][2] != "hit ratio >= 0.7" || rows[3][3] != "0.6500" {
		t.Errorf("CSV rows %q", rows)
	}
	f, err := os.Open(filepath.Join(out, "hit-ratio.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1000 || b.Dy() != 560 {
		t.Errorf("chart is %dx%d", b.Dx(), b.Dy())
	}
}

func TestRecordRejectsGarbage(t *testing.T) {
	h := newHistory()
	if err := h.record([]byte("error: the server doesn't have a resource type")); err == nil {
		t.Error("a kubectl error message was accepted as a TenantSLO list")
	}
}
