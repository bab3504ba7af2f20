package proxy

// ring is a FIFO queue in a circular buffer that grows by doubling: the order of a
// connection's replies and the replies a link owes, pushed and popped for every request
// without allocating once it has grown to the pipeline's depth.
type ring[T any] struct {
	buf     []T // len is a power of two
	head, n int
}

func newRing[T any](capacity int) ring[T] {
	size := 1
	for size < capacity {
		size *= 2
	}
	return ring[T]{buf: make([]T, size)}
}

func (r *ring[T]) len() int { return r.n }

func (r *ring[T]) push(v T) {
	if r.n == len(r.buf) {
		grown := make([]T, max(2*len(r.buf), 1))
		for i := range r.n {
			grown[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
		}
		r.buf, r.head = grown, 0
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = v
	r.n++
}

// front returns the oldest element; the ring must not be empty.
func (r *ring[T]) front() T { return r.buf[r.head] }

// at returns the i-th oldest element; i must be below len.
func (r *ring[T]) at(i int) T { return r.buf[(r.head+i)&(len(r.buf)-1)] }

// pop removes and returns the oldest element; the ring must not be empty.
func (r *ring[T]) pop() T {
	v := r.buf[r.head]
	var zero T
	r.buf[r.head] = zero // drop references
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return v
}
