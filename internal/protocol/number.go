package protocol

import "math"

// ParseInt parses a base-10 signed 64-bit integer written as an optional '-' and one or more
// digits, nothing else (no '+', no spaces). It does not allocate, unlike strconv on a converted
// string.
func ParseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	u, ok := ParseUint(b)
	if !ok {
		return 0, false
	}
	if neg {
		if u > uint64(math.MaxInt64)+1 {
			return 0, false
		}
		return -int64(u), true // wraps correctly for MinInt64
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// ParseRedisInt parses an integer argument as redis-server reads one: ParseInt without
// leading zeros ("0" itself aside) and without "-0".
func ParseRedisInt(b []byte) (int64, bool) {
	digits := b
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) > 0 && digits[0] == '0' && len(b) > 1 {
		return 0, false
	}
	return ParseInt(b)
}

// IsDigits reports whether b is one or more ASCII digits.
func IsDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// OrDefault returns v when it is positive and def otherwise: zero-valued limits take defaults.
func OrDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// ParseUint parses a base-10 unsigned 64-bit integer made of one or more digits only.
func ParseUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
