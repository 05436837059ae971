package driverkit

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Redialer keeps a driver's one connection to its broker (RabbitMQ's, Artemis's): the
// live one and, once it is lost, a new one dialled when a caller next needs it. One dial
// runs at a time, in a goroutine of its own, bounded by Timeout; callers wait for it
// until their context ends (one that stops waiting leaves it to the next). A dial that
// follows failed ones waits out Backoff first. Close abandons a dial under way. Set the
// fields, then call Start with the first connection.
type Redialer[C comparable] struct {
	// Dial opens a connection. Nil when a lost connection cannot be replaced (one the
	// user made): Get then fails with Unrecoverable.
	Dial func(ctx context.Context) (C, error)
	// Live reports whether a connection can still be used.
	Live func(C) bool
	// Installed runs when c becomes the connection, in place of old (the zero C for the
	// first): the driver closes old if it is its own and watches c for its loss. It runs
	// before the callers waiting for c get it, without the Redialer's lock.
	Installed func(old, c C)
	// Release closes a connection dialled after Close, which nobody will use.
	Release func(C)
	// Timeout bounds each dial; Backoff is the wait before a dial after failed ones.
	Timeout time.Duration
	Backoff Backoff
	// FirstTimeout, when above zero, bounds the first dial after a connection was lost
	// instead of Timeout, and each dial that fails doubles it, up to Timeout
	// ([DialTimeout]). The network that killed a connection may still be silent when
	// the loss is found (a heartbeat's 4.5 s into a 5 s black hole): a dial into it is
	// accepted and its handshake never answered, and with the whole Timeout (30 s) the
	// driver waits that long after the network healed.
	FirstTimeout time.Duration
	// Unrecoverable is Get's error once the connection is lost when Dial is nil.
	Unrecoverable error

	mu       sync.Mutex
	conn     C
	gen      uint64        // bumped for every connection installed
	dialing  chan struct{} // closed when the dial under way ends; nil when none is
	last     error         // why the last connection was lost, or the last dial failed
	failures int           // dials failed in a row
	lastDial time.Time
	closed   bool
	life     context.Context // ends with Close: a dial under way is abandoned
	endLife  context.CancelFunc
}

var errNoConnection = errors.New("no connection to the broker")

// Start installs c, the first connection.
func (r *Redialer[C]) Start(c C) {
	r.life, r.endLife = context.WithCancel(context.Background())
	r.install(c)
}

func (r *Redialer[C]) install(c C) {
	r.mu.Lock()
	old := r.conn
	r.conn, r.last = c, nil
	r.gen++
	r.mu.Unlock()
	r.Installed(old, c)
}

// Get returns the live connection and its generation (one more for each connection
// installed). Without one it waits, until ctx ends, for the dial under way or one it
// starts, and returns that dial's error when it failed (the error Dial returned). It
// returns ctx.Err() when ctx ends first and [transport.ErrClosed] once the Redialer is
// closed.
func (r *Redialer[C]) Get(ctx context.Context) (C, uint64, error) {
	var zero C
	for waited := false; ; waited = true {
		r.mu.Lock()
		conn, gen, closed, done, last := r.conn, r.gen, r.closed, r.dialing, r.last
		live := conn != zero && r.Live(conn)
		if !closed && !live && !waited && done == nil && r.Dial != nil {
			done = make(chan struct{})
			r.dialing = done
			go r.redial(done)
		}
		r.mu.Unlock()
		switch {
		case closed:
			return zero, 0, transport.ErrClosed
		case live:
			return conn, gen, nil
		case r.Dial == nil:
			return zero, 0, r.Unrecoverable
		case waited:
			return zero, 0, cmp.Or(last, errNoConnection)
		}
		select {
		case <-done:
		case <-ctx.Done():
			return zero, 0, ctx.Err()
		}
	}
}

// redial waits out the backoff after failed dials, dials, and installs the connection
// or records why it could not.
func (r *Redialer[C]) redial(done chan struct{}) {
	defer close(done)
	var wait time.Duration
	r.mu.Lock()
	if r.failures > 0 {
		wait = time.Until(r.lastDial.Add(r.Backoff.Delay(r.failures)))
	}
	limit := DialTimeout(r.FirstTimeout, r.Timeout, r.failures)
	r.mu.Unlock()
	var c C
	err := r.life.Err()
	if err == nil && wait > 0 {
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-r.life.Done():
			err = r.life.Err()
		}
		timer.Stop()
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(r.life, limit)
		c, err = r.Dial(ctx)
		cancel()
	}
	r.mu.Lock()
	r.dialing, r.lastDial = nil, time.Now()
	switch {
	case r.closed:
		r.mu.Unlock()
		if err == nil {
			r.Release(c)
		}
		return
	case err != nil:
		r.failures++
		r.last = err
		r.mu.Unlock()
		return
	}
	r.failures = 0
	r.mu.Unlock()
	r.install(c)
}

// DialTimeout is the bound of a redial after failed ones in a row: first doubled for
// each failure, at most limit; limit alone when first is not above zero.
func DialTimeout(first, limit time.Duration, failed int) time.Duration {
	if first <= 0 {
		return limit
	}
	d := first
	for range failed {
		if d >= limit {
			break
		}
		d *= 2
	}
	return min(d, limit)
}

// Current returns the connection held, its generation and whether it is live, without
// dialling.
func (r *Redialer[C]) Current() (C, uint64, bool) {
	var zero C
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conn, r.gen, r.conn != zero && r.Live(r.conn)
}

// Drop forgets c when it is the connection held (the driver found it broken before the
// client said so) and releases it: the next Get dials.
func (r *Redialer[C]) Drop(c C) {
	var zero C
	r.mu.Lock()
	drop := c != zero && r.conn == c
	if drop {
		r.conn = zero
	}
	r.mu.Unlock()
	if drop {
		r.Release(c)
	}
}

// Lost records why the connection was lost (the client's word for it), which Get
// returns when the next dial fails without an error of its own.
func (r *Redialer[C]) Lost(err error) {
	r.mu.Lock()
	r.last = err
	r.mu.Unlock()
}

// Last returns why the last connection was lost, or the last dial failed (nil while
// the connection is live).
func (r *Redialer[C]) Last() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// Closed reports whether Close was called.
func (r *Redialer[C]) Closed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Close makes Get fail with [transport.ErrClosed] from then on, abandons a dial under
// way, and returns the connection held (the zero C if none), for the driver to close.
func (r *Redialer[C]) Close() C {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.endLife != nil {
		r.endLife()
	}
	return r.conn
}
