package driverkit

import (
	"context"
	"sync/atomic"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Attachment is a consumer's hold on its queue (a channel consuming it, a receiver
// link): opened by the first Get, and again by the next Get once the driver reports it
// lost. One caller opens at a time; the others wait for it until their context ends or
// Done closes. The live one is read without a lock. Make it with [NewAttachment].
type Attachment[L any] struct {
	// Done, when set (to the kit consumer's [Consumer.Done]), makes a Get waiting for
	// another caller's opening return [transport.ErrClosed] when it closes.
	Done <-chan struct{}

	open   func(ctx context.Context) (*L, error)
	cur    atomic.Pointer[L]
	token  chan struct{} // held while opening or closing
	closed bool          // guarded by token
}

// NewAttachment returns the attachment that open opens.
func NewAttachment[L any](open func(ctx context.Context) (*L, error)) *Attachment[L] {
	return &Attachment[L]{open: open, token: make(chan struct{}, 1)}
}

// Get returns the live attachment, opening one when there is none. It returns ctx.Err()
// when ctx ends first, and [transport.ErrClosed] once Close was called or Done closes.
func (a *Attachment[L]) Get(ctx context.Context) (*L, error) {
	if l := a.cur.Load(); l != nil {
		return l, nil
	}
	select {
	case a.token <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-a.Done:
		return nil, transport.ErrClosed
	}
	defer func() { <-a.token }()
	if a.closed {
		return nil, transport.ErrClosed
	}
	if l := a.cur.Load(); l != nil {
		return l, nil
	}
	l, err := a.open(ctx)
	if err != nil {
		return nil, err
	}
	a.cur.Store(l)
	return l, nil
}

// Current returns the live attachment, or nil.
func (a *Attachment[L]) Current() *L { return a.cur.Load() }

// Lost forgets l when it is still the live one, and reports whether it was: the next
// Get opens another.
func (a *Attachment[L]) Lost(l *L) bool { return l != nil && a.cur.CompareAndSwap(l, nil) }

// Close makes Get fail with [transport.ErrClosed] from then on and returns the live
// attachment (nil if none), for the driver to close. It waits for an opening under way
// until ctx ends, and then returns ctx.Err().
func (a *Attachment[L]) Close(ctx context.Context) (*L, error) {
	select {
	case a.token <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-a.token }()
	a.closed = true
	return a.cur.Swap(nil), nil
}
