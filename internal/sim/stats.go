package sim

import (
	"container/heap"
	"math"
)

// latencyHist is a histogram of latencies in seconds with logarithmic buckets: histPerDecade
// buckets per factor of 10 from histMin up, everything below in the first bucket and above
// in the last.
type latencyHist struct {
	counts []int64
	total  int64
}

const (
	histMin       = 1e-6
	histPerDecade = 100
	histDecades   = 8 // 1 µs to 100 s
)

func newLatencyHist() latencyHist {
	return latencyHist{counts: make([]int64, histPerDecade*histDecades)}
}

func (h *latencyHist) add(seconds float64) {
	i := 0
	if seconds > histMin {
		i = min(int(math.Log10(seconds/histMin)*histPerDecade), len(h.counts)-1)
	}
	h.counts[i]++
	h.total++
}

// quantile returns the q-quantile (the upper edge of the bucket holding it, so within 2.3% of
// the true value), or NaN when the histogram is empty.
func (h *latencyHist) quantile(q float64) float64 {
	if h.total == 0 {
		return math.NaN()
	}
	rank := int64(math.Ceil(q * float64(h.total)))
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= max(rank, 1) {
			return histMin * math.Pow(10, float64(i+1)/histPerDecade)
		}
	}
	return histMin * math.Pow(10, histDecades)
}

// nodeStats is one tenant's traffic on one node during an interval.
type nodeStats struct {
	requests int64 // every request routed to the node, refused ones included
	bytes    int64 // bytes of the requests served
	hits     int64
	misses   int64 // served misses
	refused  int64 // refused by the tenant's token bucket (served by the backend)
}

func (s nodeStats) served() int64 { return s.hits + s.misses }

// pendingRequest is a request whose queueing delay is known only at the end of its interval,
// when the nodes' loads are.
type pendingRequest struct {
	tenant int32
	node   int32   // -1: never reached a node (refused or unrouted)
	before float32 // seconds of service and throttling, before the node's queue
}

// arrivalHeap orders tenants by their next request time (ties by tenant index, so the merge
// is deterministic).
type arrivalHeap []arrival

type arrival struct {
	at     float64
	tenant int
}

func (a arrival) less(b arrival) bool { return a.at < b.at || a.at == b.at && a.tenant < b.tenant }

// push and pop order arrivals through container/heap.
func (h *arrivalHeap) push(a arrival) { heap.Push(h, a) }
func (h *arrivalHeap) pop() arrival   { return heap.Pop(h).(arrival) }

// heap.Interface.
func (h arrivalHeap) Len() int           { return len(h) }
func (h arrivalHeap) Less(i, j int) bool { return h[i].less(h[j]) }
func (h arrivalHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *arrivalHeap) Push(x any)        { *h = append(*h, x.(arrival)) }
func (h *arrivalHeap) Pop() any {
	s := *h
	last := s[len(s)-1]
	*h = s[:len(s)-1]
	return last
}
