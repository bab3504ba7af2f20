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

// Package decimal reads and writes the decimal strings the cacheqos API uses for ratios and
// factors ("0.95", "1.05"): CRDs must not carry floating point numbers, which do not round-trip
// through every client. The schema checks these strings with Pattern plus CEL range rules;
// this package is the Go side of the same rules, with no Kubernetes imports.
package decimal

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Pattern is the schema pattern of every decimal string in the API: digits, optionally
// followed by a dot and more digits. No sign, no exponent, no spaces.
const Pattern = `^[0-9]+([.][0-9]+)?$`

var patternRE = regexp.MustCompile(Pattern)

// formatPlaces is how many digits after the dot Format keeps: enough to tell a 0.9995 hit
// ratio from 0.999, few enough to read in `kubectl get`.
const formatPlaces = 4

// Parse parses a decimal string as the schema accepts it (Pattern).
func Parse(s string) (float64, error) {
	if !patternRE.MatchString(s) {
		return 0, fmt.Errorf("%q is not a decimal number such as 0.95 (digits, optional dot and digits)", s)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		// Only reachable for digit strings beyond float64's range.
		return 0, fmt.Errorf("%q is not a usable decimal number: %w", s, err)
	}
	return v, nil
}

// Format formats v for a decimal status field: at most four digits after the dot, trailing
// zeros dropped ("0.934", "1"). Negative values keep their sign, which only fields documented
// as signed accept. NaN and infinities have no decimal form and are an error.
func Format(v float64) (string, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "", fmt.Errorf("%v has no decimal representation", v)
	}
	s := strconv.FormatFloat(v, 'f', formatPlaces, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		s = "0"
	}
	return s, nil
}

// Range is the interval a decimal field must lie in: [Min, Max], or (Min, Max] when
// MinExclusive.
type Range struct {
	Min, Max     float64
	MinExclusive bool
}

func (r Range) String() string {
	left := "["
	if r.MinExclusive {
		left = "("
	}
	return fmt.Sprintf("%s%g, %g]", left, r.Min, r.Max)
}

// ParseIn parses s and checks that it lies in r.
func (r Range) ParseIn(s string) (float64, error) {
	v, err := Parse(s)
	if err != nil {
		return 0, err
	}
	if v > r.Max || v < r.Min || (r.MinExclusive && v == r.Min) {
		return 0, fmt.Errorf("%s is outside %s", s, r)
	}
	return v, nil
}
