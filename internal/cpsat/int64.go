package cpsat

import "math"

// Overflow-checked int64 arithmetic for model validation.

func addInt64(a, b int64) (int64, bool) {
	s := a + b
	return s, (b >= 0) == (s >= a)
}

func mulInt64(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	p := a * b
	// Division detects wrap-around except for MinInt64 * -1, which wraps to
	// MinInt64 and divides back "correctly".
	if p/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		return 0, false
	}
	return p, true
}

// atInt64Limit reports whether any value sits on an int64 limit; the solver's
// saturating arithmetic treats those as "overflowed".
func atInt64Limit(vs ...int64) bool {
	for _, v := range vs {
		if v == math.MaxInt64 || v == math.MinInt64 {
			return true
		}
	}
	return false
}
