package driverkit

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Pool holds a driver's clients of one destination each (a producer per topic, a
// sender per queue): each is made on first use, once even when several callers want it
// at once, and they are closed together by [Pool.Close]. A client whose making failed
// is forgotten, so that the next caller tries again. The zero value is not usable: set
// Make and Free.
type Pool[C comparable] struct {
	// Make makes the client of name. It runs in a goroutine of its own, so that a caller
	// whose context ends stops waiting for it.
	Make func(name string) (C, error)
	// Free closes a client (flushing what it holds first), bounded by ctx.
	Free func(ctx context.Context, c C) error
	// Discard closes a client Drop forgot (its write failed); nil means Free. A client
	// that may be closing itself after the failure wants a close without a flush.
	Discard func(ctx context.Context, c C) error

	mu     sync.Mutex
	closed bool
	slots  map[string]*poolSlot[C]
}

// poolSlot is one destination's client; ready is closed once c or err is set.
type poolSlot[C any] struct {
	ready chan struct{}
	made  bool // c or err is set (under the pool's lock): Get needs no channel
	c     C
	err   error
}

// Get returns the client of name, making it on first use. It returns ctx.Err() when
// ctx ends first, and [transport.ErrClosed] once the pool is closed.
func (p *Pool[C]) Get(ctx context.Context, name string) (C, error) {
	var zero C
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return zero, transport.ErrClosed
	}
	s, ok := p.slots[name]
	if ok && s.made {
		p.mu.Unlock()
		return s.c, s.err
	}
	if !ok {
		if p.slots == nil {
			p.slots = map[string]*poolSlot[C]{}
		}
		s = &poolSlot[C]{ready: make(chan struct{})}
		p.slots[name] = s
		go p.make(name, s)
	}
	p.mu.Unlock()
	select {
	case <-s.ready:
		return s.c, s.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

func (p *Pool[C]) make(name string, s *poolSlot[C]) {
	c, err := p.Make(name)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err != nil:
		if p.slots[name] == s {
			delete(p.slots, name)
		}
		s.err = err
	case p.closed:
		s.err = transport.ErrClosed
		go p.Free(context.Background(), c)
	default:
		s.c = c
	}
	s.made = true
	close(s.ready)
}

// Drop forgets the client of name when it is still c (the caller's write through it
// failed in a way the client does not recover from) and closes it in the background:
// the next Get makes a new one.
func (p *Pool[C]) Drop(name string, c C) {
	p.mu.Lock()
	s, ok := p.slots[name]
	drop := ok && isReady(s) && s.err == nil && s.c == c
	if drop {
		delete(p.slots, name)
	}
	p.mu.Unlock()
	if drop {
		free := p.Free
		if p.Discard != nil {
			free = p.Discard
		}
		go free(context.Background(), s.c)
	}
}

func isReady[C any](s *poolSlot[C]) bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// Close closes the pool: Get fails with [transport.ErrClosed] from then on, and every
// client is freed, each bounded by ctx (a client still being made when ctx ends is freed
// once it is made). It returns nil, or the errors of Free, each naming its destination,
// joined. A second Close returns nil.
func (p *Pool[C]) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	slots := p.slots
	p.slots = nil
	p.mu.Unlock()
	var errs []error
	for name, s := range slots {
		if !isReady(s) {
			select {
			case <-s.ready:
			case <-ctx.Done():
				continue // made after closed was set: make frees it
			}
		}
		if s.err == nil {
			if err := p.Free(ctx, s.c); err != nil {
				errs = append(errs, fmt.Errorf("close the client of %q: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}
