package driverkit

import (
	"context"
	"sync"
)

// Coalescer makes one broker request of the calls made while the previous request is
// on its way (acknowledgements of many workers and pipelined settlements, say), so
// that they do not wait in line, one round trip each. One goroutine sends the requests,
// one at a time, while there are calls; none runs when there are none. The zero value
// is not usable: set Send.
type Coalescer[T any] struct {
	// Send makes one request of items (in the order of the calls) and returns the error
	// of each, or one error for them all (a slice of one error for several items).
	Send func(items []T) []error

	mu      sync.Mutex
	next    *coalesced[T] // filling while a request is on its way
	sending bool
}

type coalesced[T any] struct {
	items []T
	done  chan struct{} // closed when errs is set
	errs  []error
}

// Do adds item to the next request and waits, until ctx ends, for its outcome.
func (c *Coalescer[T]) Do(ctx context.Context, item T) error {
	c.mu.Lock()
	b := c.next
	if b == nil {
		b = &coalesced[T]{done: make(chan struct{})}
		c.next = b
	}
	i := len(b.items)
	b.items = append(b.items, item)
	if !c.sending {
		c.sending = true
		go c.send()
	}
	c.mu.Unlock()
	select {
	case <-b.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	switch {
	case len(b.errs) == len(b.items):
		return b.errs[i]
	case len(b.errs) > 0:
		return b.errs[0]
	}
	return nil
}

func (c *Coalescer[T]) send() {
	for {
		c.mu.Lock()
		b := c.next
		c.next = nil
		if b == nil {
			c.sending = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		b.errs = c.Send(b.items)
		close(b.done)
	}
}

// Await runs call, a blocking client call that takes no context (a subscribe, a
// close), and waits for it until ctx ends. When ctx ends first it returns ctx.Err(),
// and abandon, when not nil, receives what call returns later without an error (to
// close a subscription nobody waits for).
func Await[T any](ctx context.Context, call func() (T, error), abandon func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		if abandon != nil {
			go func() {
				if r := <-done; r.err == nil {
					abandon(r.v)
				}
			}()
		}
		var zero T
		return zero, ctx.Err()
	}
}
