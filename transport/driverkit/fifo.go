package driverkit

// FIFO is a first-in first-out queue that reuses its backing array, so that a steady flow
// of items through it allocates nothing: a driver's list of records waiting to be handed
// out, or of records awaiting their acknowledgement in order. The zero value is empty. It
// is not safe for concurrent use.
type FIFO[T any] struct {
	s    []T
	head int // s[head:] are the queued items
}

// Len counts the queued items.
func (q *FIFO[T]) Len() int { return len(q.s) - q.head }

// Items returns the queued items, oldest first; they stay valid until the next Push.
func (q *FIFO[T]) Items() []T { return q.s[q.head:] }

// Front returns the oldest item; the queue must not be empty.
func (q *FIFO[T]) Front() *T { return &q.s[q.head] }

// Push appends v.
func (q *FIFO[T]) Push(v T) {
	if len(q.s) == cap(q.s) && q.head >= len(q.s)/2 {
		// At least half the array is popped: move the items down instead of growing it.
		n := copy(q.s, q.s[q.head:])
		clear(q.s[n:])
		q.s, q.head = q.s[:n], 0
	}
	q.s = append(q.s, v)
}

// Pop removes and returns the oldest item; the queue must not be empty.
func (q *FIFO[T]) Pop() T {
	v := q.s[q.head]
	var zero T
	q.s[q.head] = zero
	q.head++
	if q.head == len(q.s) {
		q.s, q.head = q.s[:0], 0
	}
	return v
}

// Truncate keeps the n oldest items.
func (q *FIFO[T]) Truncate(n int) {
	clear(q.s[q.head+n:])
	q.s = q.s[:q.head+n]
	if n == 0 {
		q.s, q.head = q.s[:0], 0
	}
}
