package mrc

// fenwick is a binary indexed tree of int64 over positions 1..len(tree)-1: point updates and
// prefix sums in O(log n), and an O(n) rebuild from point values.
type fenwick struct {
	tree []int64
}

func newFenwick(n int) fenwick { return fenwick{tree: make([]int64, n+1)} }

// size returns the number of positions.
func (f *fenwick) size() int { return len(f.tree) - 1 }

// add adds delta at position i (1-based).
func (f *fenwick) add(i int, delta int64) {
	for ; i < len(f.tree); i += i & -i {
		f.tree[i] += delta
	}
}

// prefix returns the sum of positions 1..i.
func (f *fenwick) prefix(i int) int64 {
	var s int64
	for ; i > 0; i -= i & -i {
		s += f.tree[i]
	}
	return s
}

// rebuild turns the slice, which the caller has filled with point values at positions 1..n,
// into a tree in place, in O(n).
func (f *fenwick) rebuild() {
	for i := 1; i < len(f.tree); i++ {
		if j := i + (i & -i); j < len(f.tree) {
			f.tree[j] += f.tree[i]
		}
	}
}
