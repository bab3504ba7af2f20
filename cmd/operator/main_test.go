package main

import (
	"slices"
	"testing"
)

func TestNamespaces(t *testing.T) {
	tests := []struct {
		list string
		want []string
	}{
		{"", nil},
		{"cache", []string{"cache"}},
		{"cache, team-a,,team-b ", []string{"cache", "team-a", "team-b"}},
	}
	for _, tt := range tests {
		if got := namespaces(tt.list); !slices.Equal(got, tt.want) {
			t.Errorf("namespaces(%q) = %q, want %q", tt.list, got, tt.want)
		}
	}
}
