package driverkit

import (
	"context"
	"fmt"
	"sync"
)

// Receipts collects the outcomes of writes a client confirms asynchronously (a
// producer's send callbacks), in the order of a batch: a driver's confirmed publish, or
// the Confirm of a pipelined settlement. Make it with [NewReceipts].
type Receipts struct {
	mu      sync.Mutex
	errs    []error
	open    []bool // a write whose receipt has not come
	pending int
	changed chan struct{} // closed when pending reaches zero
}

// NewReceipts returns the receipts of n writes; a write not handed over (no Expect)
// keeps the error set with Set, or nil.
func NewReceipts(n int) *Receipts { return &Receipts{errs: make([]error, n), open: make([]bool, n)} }

// Set records the outcome of write i, which was not handed over (refused before it).
func (r *Receipts) Set(i int, err error) { r.mu.Lock(); r.errs[i] = err; r.mu.Unlock() }

// Expect records that write i was handed over: its outcome comes with Done.
func (r *Receipts) Expect(i int) {
	r.mu.Lock()
	r.open[i] = true
	r.pending++
	r.mu.Unlock()
}

// Done records the confirmation (nil) or failure of write i. A Done that comes after
// Wait gave up on it is ignored.
func (r *Receipts) Done(i int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.open[i] {
		return
	}
	r.open[i] = false
	r.errs[i] = err
	r.pending--
	if r.pending == 0 && r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// Wait returns the outcomes once every write expected is done, or when ctx ends: the
// writes still open are then reported with ctx's error.
func (r *Receipts) Wait(ctx context.Context) []error {
	r.mu.Lock()
	if r.pending > 0 {
		ch := make(chan struct{})
		r.changed = ch
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		r.mu.Lock()
	}
	defer r.mu.Unlock()
	for i, open := range r.open {
		if open {
			r.open[i] = false
			r.errs[i] = fmt.Errorf("waiting for the receipt of a write: %w", ctx.Err())
		}
	}
	return r.errs
}
