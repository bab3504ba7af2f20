package curve

// DefaultTableCapacity is how many points a Table keeps unless told otherwise: Soft-QoS keeps
// up to 1,024 (size, hit rate) entries per application.
const DefaultTableCapacity = 1024

// Table is Soft-QoS' per-tenant performance table: the (size, hit ratio) points observed so
// far, at most one per size. Recording a size again replaces the old point and makes it the
// most recent, so a phase change shows up at once; when full, the least recently recorded
// point is forgotten. The zero value is not usable: use NewTable.
type Table struct {
	capacity int
	// order holds the sizes from least to most recently recorded.
	order []int64
	ratio map[int64]float64
}

// NewTable returns an empty table keeping at most capacity points (DefaultTableCapacity when
// capacity <= 0).
func NewTable(capacity int) *Table {
	if capacity <= 0 {
		capacity = DefaultTableCapacity
	}
	return &Table{capacity: capacity, ratio: make(map[int64]float64)}
}

// Record stores the hit ratio observed at size, replacing any older point at that size.
func (t *Table) Record(p Point) {
	if _, ok := t.ratio[p.SizeBytes]; ok {
		for i, s := range t.order {
			if s == p.SizeBytes {
				t.order = append(t.order[:i], t.order[i+1:]...)
				break
			}
		}
	}
	t.ratio[p.SizeBytes] = p.HitRatio
	t.order = append(t.order, p.SizeBytes)
	if len(t.order) > t.capacity {
		delete(t.ratio, t.order[0])
		t.order = t.order[1:]
	}
}

// Len returns the number of points held.
func (t *Table) Len() int { return len(t.order) }

// Points returns the points from least to most recently recorded.
func (t *Table) Points() []Point {
	out := make([]Point, len(t.order))
	for i, s := range t.order {
		out[i] = Point{SizeBytes: s, HitRatio: t.ratio[s]}
	}
	return out
}

// MaxRecorded returns the highest hit ratio in the table (0 when empty): Soft-QoS' max(HR_j),
// the ratio the tenant has shown it can reach.
func (t *Table) MaxRecorded() float64 {
	best := 0.0
	for _, r := range t.ratio {
		best = max(best, r)
	}
	return best
}
