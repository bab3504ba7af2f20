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

package v1alpha1

import (
	"fmt"

	"github.com/cacheqos/cacheqos/api/v1alpha1/decimal"
)

// Ratios and factors are decimal strings (see package decimal); these are their ranges.
var (
	// ratioRange is where hit ratios and sampling rates live.
	ratioRange = decimal.Range{Min: 0, Max: 1, MinExclusive: true}
	// degradationRange bounds Maxperf's delta: 1 means "as good as a fair share", 10 is
	// already a tenant that barely cares.
	degradationRange = decimal.Range{Min: 1, Max: MaxDegradationLimit}
)

// MaxDegradationLimit is the largest maxDegradation target the schema accepts.
const MaxDegradationLimit = 10

// parseDecimalIn parses the decimal string s of field and checks it lies in r.
func parseDecimalIn(field, s string, r decimal.Range) (float64, error) {
	v, err := r.ParseIn(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	return v, nil
}
