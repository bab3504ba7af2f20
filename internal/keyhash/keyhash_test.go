package keyhash

import (
	"math"
	"strconv"
	"testing"
)

// TestGolden pins hash values: routing and sampling decisions must never change between
// releases or processes, so a failure here means key placement changed for every user.
func TestGolden(t *testing.T) {
	tests := []struct {
		key        string
		sum        uint64
		salt       uint64
		derivedByA uint64 // Derive(Sum64String(key), Salt("node-a"))
	}{
		// The first three sums are the published XXH64 reference values for seed 0.
		{"", 0xef46db3751d8e999, 0x6a9fc0cf8e5dcf7e, 0x889f31c2eff2d2e7},
		{"a", 0xd24ec4f1a98c6e5b, 0x93cc77e6d960b302, 0xc6db6a4d160d6486},
		{"abc", 0x44bc2cf5ad770999, 0x20297a33cee1a6ae, 0x99ad19eed06a8630},
		{"user:1000:profile", 0xaff6f7404f42cf19, 0xc9ba9711b827e203, 0x8e21442c0ff97ad1},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := Sum64([]byte(tt.key)); got != tt.sum {
				t.Errorf("Sum64 = %#x, want %#x", got, tt.sum)
			}
			if got := Sum64String(tt.key); got != tt.sum {
				t.Errorf("Sum64String = %#x, want %#x", got, tt.sum)
			}
			if got := Salt(tt.key); got != tt.salt {
				t.Errorf("Salt = %#x, want %#x", got, tt.salt)
			}
			if got := Derive(tt.sum, Salt("node-a")); got != tt.derivedByA {
				t.Errorf("Derive = %#x, want %#x", got, tt.derivedByA)
			}
		})
	}
}

// TestDeriveIndependence checks that selections made with two salts are independent: the
// fraction of keys selected by both equals the product of the two fractions, and each output
// bit is set for half of the keys.
func TestDeriveIndependence(t *testing.T) {
	const n = 200000
	saltA, saltB := Salt("sampling"), Salt("node-7")
	var both, onlyA, onlyB int
	var bitCounts [64]int
	for i := range n {
		h := Sum64String("key:" + strconv.Itoa(i))
		a := Derive(h, saltA) < math.MaxUint64/10 // 10% selection
		b := Derive(h, saltB) < math.MaxUint64/4  // 25% selection
		switch {
		case a && b:
			both++
		case a:
			onlyA++
		case b:
			onlyB++
		}
		d := Derive(h, saltA)
		for bit := range 64 {
			bitCounts[bit] += int(d >> bit & 1)
		}
	}
	fracA := float64(both+onlyA) / n
	fracB := float64(both+onlyB) / n
	fracBoth := float64(both) / n
	if math.Abs(fracA-0.10) > 0.005 || math.Abs(fracB-0.25) > 0.005 {
		t.Fatalf("selection fractions %.4f, %.4f, want 0.10, 0.25", fracA, fracB)
	}
	if math.Abs(fracBoth-fracA*fracB) > 0.003 {
		t.Errorf("joint selection %.4f, want product %.4f: salts are correlated", fracBoth, fracA*fracB)
	}
	for bit, c := range bitCounts {
		if f := float64(c) / n; math.Abs(f-0.5) > 0.01 {
			t.Errorf("bit %d set for %.4f of keys, want 0.5", bit, f)
		}
	}
}

// TestMixIsBijective spot-checks that Mix never maps two nearby inputs to one output, the
// property Derive relies on to keep distinct key hashes distinct.
func TestMixIsBijective(t *testing.T) {
	seen := make(map[uint64]uint64, 1<<16)
	for x := uint64(0); x < 1<<16; x++ {
		for _, in := range []uint64{x, x << 48, ^x} {
			out := Mix(in)
			if prev, ok := seen[out]; ok && prev != in {
				t.Fatalf("Mix(%#x) = Mix(%#x) = %#x", in, prev, out)
			}
			seen[out] = in
		}
	}
}

func BenchmarkSum64(b *testing.B) {
	for _, size := range []int{8, 32, 128} {
		key := make([]byte, size)
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			var sink uint64
			for b.Loop() {
				sink += Sum64(key)
			}
			_ = sink
		})
	}
}
