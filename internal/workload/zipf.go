package workload

import (
	"math"
	"math/rand/v2"
)

// zipf draws ranks 1..n with P(r) proportional to r^-s by rejection-inversion (W. Hörmann and
// G. Derflinger, "Rejection-inversion to generate variates from monotone discrete
// distributions", 1996): invert the integral H of the continuous hat h(x) = x^-s, round to the
// nearest rank, and accept with a cheap test that almost always passes. Constant time and
// memory per draw for any n and any s >= 0 (math/rand's Zipf needs s > 1).
type zipf struct {
	n       float64
	s       float64
	hLow    float64 // H(1.5) - 1: the top of the sampling interval, covering rank 1 entirely
	hHigh   float64 // H(n + 0.5)
	squeeze float64 // ranks k with k - x <= squeeze are accepted without evaluating H
}

func newZipf(n int, s float64) zipf {
	z := zipf{n: float64(n), s: s}
	z.hLow = z.bigH(1.5) - 1
	z.hHigh = z.bigH(z.n + 0.5)
	z.squeeze = 2 - z.bigHInverse(z.bigH(2.5)-z.h(2))
	return z
}

// rank returns a rank in [1, n].
func (z zipf) rank(rng *rand.Rand) uint64 {
	for {
		u := z.hHigh + rng.Float64()*(z.hLow-z.hHigh)
		x := z.bigHInverse(u)
		k := math.Min(math.Max(math.Floor(x+0.5), 1), z.n)
		if k-x <= z.squeeze || u >= z.bigH(k+0.5)-z.h(k) {
			return uint64(k)
		}
	}
}

// h is the hat density x^-s.
func (z zipf) h(x float64) float64 { return math.Exp(-z.s * math.Log(x)) }

// bigH is an antiderivative of h: (x^(1-s) - 1) / (1-s), written to stay exact as s -> 1
// (where it becomes log x).
func (z zipf) bigH(x float64) float64 {
	lx := math.Log(x)
	return expm1Over((1-z.s)*lx) * lx
}

// bigHInverse inverts bigH.
func (z zipf) bigHInverse(y float64) float64 {
	t := max(y*(1-z.s), -1) // rounding can push t just below the domain of log1p
	return math.Exp(log1pOver(t) * y)
}

// expm1Over returns (e^x - 1)/x, with its limit 1 at x = 0.
func expm1Over(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Expm1(x) / x
	}
	return 1 + x/2*(1+x/3)
}

// log1pOver returns log(1+x)/x, with its limit 1 at x = 0.
func log1pOver(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Log1p(x) / x
	}
	return 1 - x*(0.5-x/3)
}
