package protocol

import (
	"strconv"
	"testing"
)

func TestParseInt(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"42", 42, true}, {"-7", -7, true}, {"007", 7, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"-9223372036854775808", -9223372036854775808, true},
		{"9223372036854775808", 0, false}, {"-9223372036854775809", 0, false},
		{"", 0, false}, {"-", 0, false}, {"+1", 0, false}, {" 1", 0, false}, {"1 ", 0, false},
		{"1e3", 0, false}, {"--1", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseInt([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseInt(%q) = %d, %v", tt.in, got, ok)
		}
	}
	for in, want := range map[string]bool{"0": true, "10": true, "-10": true, "00": false, "01": false, "-0": false, "-01": false, "": false} {
		if _, ok := ParseRedisInt([]byte(in)); ok != want {
			t.Errorf("ParseRedisInt(%q) ok = %v, want %v", in, ok, want)
		}
	}
	if got, ok := ParseUint([]byte("18446744073709551615")); !ok || got != 18446744073709551615 {
		t.Errorf("max uint64: %d %v", got, ok)
	}
	if _, ok := ParseUint([]byte("18446744073709551616")); ok {
		t.Error("uint64 overflow accepted")
	}
}

// FuzzParseInt checks ParseInt against strconv on the inputs both should accept.
func FuzzParseInt(f *testing.F) {
	for _, s := range []string{"0", "-1", "9223372036854775807", "-9223372036854775808", "+5", "1_000", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := ParseInt([]byte(s))
		want, err := strconv.ParseInt(s, 10, 64)
		plain := len(s) > 0 && s[0] != '+' // strconv accepts a leading '+', RESP and memcached do not
		if plain && ok != (err == nil) || ok && got != want {
			t.Fatalf("ParseInt(%q) = %d, %v; strconv %d, %v", s, got, ok, want, err)
		}
		u, uok := ParseUint([]byte(s))
		uwant, uerr := strconv.ParseUint(s, 10, 64)
		if plain && uok != (uerr == nil) || uok && u != uwant {
			t.Fatalf("ParseUint(%q) = %d, %v; strconv %d, %v", s, u, uok, uwant, uerr)
		}
	})
}

func TestIsDigitsAndOrDefault(t *testing.T) {
	for in, want := range map[string]bool{"0": true, "123": true, "": false, "-1": false, "1a": false} {
		if IsDigits([]byte(in)) != want {
			t.Errorf("IsDigits(%q)", in)
		}
	}
	if OrDefault(0, 5) != 5 || OrDefault(-1, 5) != 5 || OrDefault(3, 5) != 3 {
		t.Error("OrDefault")
	}
}
