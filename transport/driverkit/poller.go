package driverkit

import (
	"context"
	"sync"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Poller runs the long polls of a driver whose broker must not see a receive
// cancelled (SQS may have handed a cancelled ReceiveMessage messages already, which
// would then stay hidden until their visibility timeout): a poll runs in a goroutine of
// its own, a Receive whose context ends stops waiting for it, and what the poll
// receives waits for the next Receive, or for Drain when the consumer closes. One poll
// runs at a time. The zero value is not usable: set Poll.
type Poller[M any] struct {
	// Poll receives up to n messages. The driver bounds it (a timeout, a context that
	// ends when the consumer closes); its error goes to one Receive.
	Poll func(n int) ([]M, error)

	mu    sync.Mutex
	cur   *poll[M] // the poll in flight; nil when none
	stash []M      // received by a poll, not handed out yet
}

type poll[M any] struct {
	done chan struct{} // closed when got and err are set
	got  []M
	err  error
}

// Receive stores up to len(into) messages: those a poll left, else those of the poll in
// flight, or of a new one. It returns ctx.Err() when ctx ends and [transport.ErrClosed]
// when closed is closed, leaving the poll to run.
func (p *Poller[M]) Receive(ctx context.Context, closed <-chan struct{}, into []M) (int, error) {
	for {
		p.mu.Lock()
		if len(p.stash) > 0 {
			n := copy(into, p.stash)
			clear(p.stash[:n])
			p.stash = p.stash[n:]
			p.mu.Unlock()
			return n, nil
		}
		c := p.cur
		if c == nil {
			c = &poll[M]{done: make(chan struct{})}
			p.cur = c
			go func(n int) {
				defer close(c.done)
				c.got, c.err = p.Poll(n)
			}(len(into))
		}
		p.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-closed:
			return 0, transport.ErrClosed
		}
		if err := p.collect(c); err != nil {
			return 0, err
		}
	}
}

// collect moves what the finished poll c received to the stash and returns its error,
// once: a later call for the same poll does nothing.
func (p *Poller[M]) collect(c *poll[M]) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != c {
		return nil
	}
	p.cur = nil
	p.stash = append(p.stash, c.got...)
	return c.err
}

// Waiting returns the messages received and not handed out for which keep returns
// true: a driver that keeps a lease on held messages renews these too.
func (p *Poller[M]) Waiting(keep func(M) bool) []M {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []M
	for _, m := range p.stash {
		if keep(m) {
			out = append(out, m)
		}
	}
	return out
}

// Wait waits for the poll in flight, if any, until ctx ends.
func (p *Poller[M]) Wait(ctx context.Context) {
	p.mu.Lock()
	c := p.cur
	p.mu.Unlock()
	if c != nil {
		select {
		case <-c.done:
		case <-ctx.Done():
		}
	}
}

// Drain waits for the poll in flight, however long it takes (the driver stops it
// first), and returns every message received and not handed out, for the driver to give
// back: the Poller is empty afterwards.
func (p *Poller[M]) Drain() []M {
	p.mu.Lock()
	c := p.cur
	p.mu.Unlock()
	if c != nil {
		<-c.done
		_ = p.collect(c)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	back := p.stash
	p.stash = nil
	return back
}
