// Package settlepipe is the bookkeeping the drivers that pipeline their settle writes
// share (transport/amqp, transport/artemis, transport/pulsar): a bound on one
// consumer's settlements in flight, a count of them that Close can wait for, and the
// backoff receiving takes while pipelined writes keep failing. A pipelined settlement
// hands its writes to the broker and returns; the driver acknowledges the delivery
// once they are confirmed, from a goroutine of its own, and gives it back when one
// fails.
//
// The drivers moved onto transport/driverkit (issue 32) have its Consumer pipeline their
// settle writes instead; this package goes once none imports it.
package settlepipe

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Bounds of the pause receiving takes while pipelined settle writes keep failing: it
// doubles from MinPause to MaxPause with each failure in a row.
const (
	MinPause = 50 * time.Millisecond
	MaxPause = 2 * time.Second
)

// Inflight counts work in flight and lets a caller wait, bounded by a context, until
// none is left. Unlike a sync.WaitGroup, an Add may race with a Wait. The zero value
// is ready to use.
type Inflight struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0; nil while n is 0
}

// Add counts one more piece of work in flight.
func (f *Inflight) Add() {
	f.mu.Lock()
	if f.n == 0 {
		f.zero = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
}

// Done counts one piece of work finished.
func (f *Inflight) Done() {
	f.mu.Lock()
	f.n--
	if f.n == 0 {
		close(f.zero)
		f.zero = nil
	}
	f.mu.Unlock()
}

// Wait returns once nothing is in flight (true) or ctx ends (false).
func (f *Inflight) Wait(ctx context.Context) bool {
	f.mu.Lock()
	ch := f.zero
	f.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// Pipe bounds and counts one consumer's pipelined settlements in flight, and keeps the
// backoff after failed ones.
type Pipe struct {
	slots   chan struct{} // a token per settlement in flight
	pending Inflight      // the consumer's settlements in flight
	all     *Inflight     // the transport's count of them, or nil

	// The backoff after failed pipelined writes: Pause waits until pauseUntil (Unix
	// ns), doubling from MinPause to MaxPause while writes keep failing, so a write
	// that cannot succeed never spins the handler.
	mu         sync.Mutex
	failures   int // guarded by mu
	pauseUntil atomic.Int64
}

// New returns a Pipe for at most size settlements in flight (at least 1), counted in
// all too when all is not nil (a transport's count, for its Close).
func New(size int, all *Inflight) *Pipe {
	return &Pipe{slots: make(chan struct{}, max(size, 1)), all: all}
}

// Acquire takes a slot for one settlement, waiting while the pipe is full; it returns
// ctx.Err() when ctx ends first.
func (p *Pipe) Acquire(ctx context.Context) error {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.pending.Add()
	if p.all != nil {
		p.all.Add()
	}
	return nil
}

// Release frees the slot of one settlement that finished.
func (p *Pipe) Release() {
	if p.all != nil {
		p.all.Done()
	}
	p.pending.Done()
	<-p.slots
}

// Wait returns once no settlement of this pipe is in flight (true) or ctx ends (false).
func (p *Pipe) Wait(ctx context.Context) bool { return p.pending.Wait(ctx) }

// Failed records a failed settlement and returns the failures in a row and the pause
// the next receive waits.
func (p *Pipe) Failed() (int, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failures++
	pause := min(MinPause<<min(p.failures-1, 20), MaxPause)
	p.pauseUntil.Store(time.Now().Add(pause).UnixNano())
	return p.failures, pause
}

// Succeeded records a settlement whose writes were confirmed and returns the failures
// that went before it (0 in the common case).
func (p *Pipe) Succeeded() int {
	if p.pauseUntil.Load() == 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.failures
	p.failures = 0
	p.pauseUntil.Store(0)
	return n
}

// Pause waits out the backoff after failed pipelined writes: it returns at once when
// none failed last, ctx.Err() when ctx ends first and transport.ErrClosed when done
// closes first.
func (p *Pipe) Pause(ctx context.Context, done <-chan struct{}) error {
	until := p.pauseUntil.Load()
	if until == 0 {
		return nil
	}
	wait := time.Until(time.Unix(0, until))
	if wait <= 0 {
		return nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return transport.ErrClosed
	}
}
