package mrc

// ExactLRU computes the exact byte-weighted LRU miss-ratio curve of an access stream with
// Mattson's stack algorithm: every access is recorded, keys are compared by their full bytes,
// and each access's stack distance is the smallest LRU capacity at which it would hit. It is
// the reference the sampled Tracker is tested against and the simulator's ground truth. Not
// safe for concurrent use; memory grows with the number of distinct keys.
type ExactLRU struct {
	stack reuseStack[string]
	hist  histogram
}

// NewExactLRU returns an empty stack that reports hit ratios at sizes (see ValidateSizes).
func NewExactLRU(sizes []int64) (*ExactLRU, error) {
	if err := ValidateSizes(sizes); err != nil {
		return nil, err
	}
	return &ExactLRU{stack: newReuseStack[string](0), hist: newHistogram(sizes)}, nil
}

// Access records an access of key whose object now has size bytes (sizes below 1 count as 1).
// It returns the access's stack distance: the bytes of distinct keys accessed since key's
// previous access plus key's own size then. An LRU cache of at least distance bytes serves
// the access; seen is false (and distance 0) on a key's first access.
func (e *ExactLRU) Access(key string, size int64) (distance int64, seen bool) {
	clamped := clampSize(size)
	e.hist.accesses++
	e.hist.bytes += float64(clamped)
	above, prevSize, seen := e.stack.access(key, clamped)
	if !seen {
		e.hist.recordCold(clamped, 1)
		return 0, false
	}
	distance = above + int64(prevSize)
	e.hist.record(float64(distance), clamped, 1)
	return distance, true
}

// Write records that key now holds an object of size bytes at the top of the LRU order, as an
// engine's SET places it, without counting as an access.
func (e *ExactLRU) Write(key string, size int64) { e.stack.access(key, clampSize(size)) }

// Delete records that key left the cache: its next access is a first one.
func (e *ExactLRU) Delete(key string) { e.stack.remove(key) }

// FootprintBytes is the bytes of every key on the stack, at its latest size.
func (e *ExactLRU) FootprintBytes() int64 { return e.stack.total }

// Curve returns the exact curve of every access so far.
func (e *ExactLRU) Curve() Curve {
	c := e.hist.curve()
	c.SampleRate = 1
	c.TrackedKeys = e.stack.len()
	c.Requests = uint64(e.hist.accesses)
	c.RequestBytes = uint64(e.hist.bytes)
	return c
}
