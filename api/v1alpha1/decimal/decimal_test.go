/*
Copyright 2026 The cacheqos Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package decimal_test

import (
	"math"
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/api/v1alpha1/decimal"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    float64
		wantErr string
	}{
		{in: "0.95", want: 0.95},
		{in: "1", want: 1},
		{in: "1.05", want: 1.05},
		{in: "0", want: 0},
		{in: "007.50", want: 7.5},
		{in: "", wantErr: "not a decimal number"},
		{in: "-0.5", wantErr: "not a decimal number"},
		{in: "+1", wantErr: "not a decimal number"},
		{in: ".5", wantErr: "not a decimal number"},
		{in: "5.", wantErr: "not a decimal number"},
		{in: "1e3", wantErr: "not a decimal number"},
		{in: " 0.5", wantErr: "not a decimal number"},
		{in: "NaN", wantErr: "not a decimal number"},
		{in: "1" + strings.Repeat("0", 400), wantErr: "not a usable decimal number"},
	} {
		got, err := decimal.Parse(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0.934, "0.934"},
		{1, "1"},
		{0, "0"},
		{0.99996, "1"},
		{0.12344, "0.1234"},
		{123456.5, "123456.5"},
		{-2.25, "-2.25"},
		{-0.00001, "0"},
	} {
		got, err := decimal.Format(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Format(%v) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got, err := decimal.Format(bad); err == nil {
			t.Errorf("Format(%v) = %q, want an error", bad, got)
		}
	}
}

// FuzzParse checks that the parser never panics, accepts exactly what the schema
// pattern accepts, and that what it accepts survives a format/parse round trip.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{"0.95", "1", "1.05", "0", "", "-1", "1e5", "0.", ".5", "99999999999999999999.5", "0.00001"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := decimal.Parse(s)
		if err != nil {
			return
		}
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatalf("Parse(%q) = %v, want a finite non-negative number", s, v)
		}
		formatted, err := decimal.Format(v)
		if err != nil {
			t.Fatalf("Format(%v): %v", v, err)
		}
		back, err := decimal.Parse(formatted)
		if err != nil {
			t.Fatalf("Format(%v) = %q, which Parse rejects: %v", v, formatted, err)
		}
		if diff := math.Abs(back - v); diff > 0.00005*math.Max(1, v) {
			t.Fatalf("round trip %q -> %v -> %q -> %v drifts by %v", s, v, formatted, back, diff)
		}
	})
}

func TestRange(t *testing.T) {
	ratio := decimal.Range{Min: 0, Max: 1, MinExclusive: true}
	factor := decimal.Range{Min: 1, Max: 10}
	for _, tc := range []struct {
		r       decimal.Range
		in      string
		want    float64
		wantErr string
	}{
		{ratio, "0.5", 0.5, ""},
		{ratio, "1", 1, ""},
		{ratio, "0", 0, "0 is outside (0, 1]"},
		{ratio, "1.0001", 0, "1.0001 is outside (0, 1]"},
		{ratio, "x", 0, "not a decimal number"},
		{factor, "1", 1, ""},
		{factor, "10", 10, ""},
		{factor, "0.99", 0, "0.99 is outside [1, 10]"},
	} {
		got, err := tc.r.ParseIn(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v.ParseIn(%q) = %v, %v; want error containing %q", tc.r, tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v.ParseIn(%q) = %v, %v; want %v", tc.r, tc.in, got, err, tc.want)
		}
	}
}
