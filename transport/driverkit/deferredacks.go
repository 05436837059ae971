package driverkit

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DeferredAcks holds the acknowledgements a consumer defers: a driver's Ack hands one
// to Add and returns at once, and they go to the broker together, with the driver's
// next receive request ([DeferredAcks.Take], then [DeferredAcks.Sent]), or in one send
// after the linger, and always before [DeferredAcks.Close] returns. What could not be
// sent waits to go again (with the next receive, or after the linger, at least 100 ms
// later); an acknowledgement the broker refused because it took the message back
// meanwhile (a lapsed reservation) is logged: that message is delivered again. A nil
// *DeferredAcks defers nothing: Add returns false, Take nil.
type DeferredAcks[M any] struct {
	linger        time.Duration
	send          func(ctx context.Context, ms []M) ([]bool, error)
	log           *slog.Logger
	broker, queue string

	mu      sync.Mutex
	closed  bool
	waiting []M
	timer   *time.Timer
	flushes sync.WaitGroup // timer flushes running
}

// NewDeferredAcks returns the deferred acknowledgements of a consumer of queue. send
// sends acknowledgements in one request and reports, per message, whether the broker
// took it (false: it had taken the message back already); linger bounds how long an
// acknowledgement waits for a receive request to carry it. log and broker name the
// log lines.
func NewDeferredAcks[M any](linger time.Duration, log *slog.Logger, broker, queue string,
	send func(ctx context.Context, ms []M) ([]bool, error)) *DeferredAcks[M] {
	d := &DeferredAcks[M]{linger: linger, send: send, log: log, broker: broker, queue: queue}
	d.timer = time.AfterFunc(time.Hour, d.flushLingered)
	d.timer.Stop() // the first Add sets it
	return d
}

// Add defers the acknowledgement of m. It returns false once Close was called: the
// caller acknowledges m itself.
func (d *DeferredAcks[M]) Add(m M) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	if d.waiting = append(d.waiting, m); len(d.waiting) == 1 {
		d.timer.Reset(d.linger)
	}
	return true
}

// Waiting reports whether acknowledgements wait to be sent.
func (d *DeferredAcks[M]) Waiting() bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.waiting) > 0
}

// Take takes the acknowledgements waiting, for the driver to send with a request of its
// own; it reports their outcome with Sent.
func (d *DeferredAcks[M]) Take() []M {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ms := d.waiting
	if d.waiting = nil; len(ms) > 0 {
		d.timer.Stop()
	}
	return ms
}

// Sent records the outcome of sending ms: per message whether the broker took it, or
// err for them all, which then wait to go again (unless Close was called).
func (d *DeferredAcks[M]) Sent(ms []M, ok []bool, err error) {
	if len(ms) == 0 {
		return
	}
	if err == nil && len(ok) != len(ms) {
		err = fmt.Errorf("%d results for %d acknowledgements", len(ok), len(ms))
	}
	if err != nil {
		d.mu.Lock()
		retrying := !d.closed
		if retrying {
			d.waiting = append(ms, d.waiting...)
			d.timer.Reset(max(d.linger, 100*time.Millisecond))
		}
		d.mu.Unlock()
		d.log.Warn(d.broker+": sending deferred acks failed", "queue", d.queue, "acks", len(ms), "error", err, "retrying", retrying)
		return
	}
	refused := 0
	for _, b := range ok {
		if !b {
			refused++
		}
	}
	if refused > 0 {
		d.log.Warn(d.broker+": a message's hold lapsed before its deferred ack was sent; it is delivered again",
			"queue", d.queue, "acks", refused)
	}
}

// Flush sends the acknowledgements waiting, in one request, and returns once the
// broker has them.
func (d *DeferredAcks[M]) Flush(ctx context.Context) error {
	ms := d.Take()
	if len(ms) == 0 {
		return nil
	}
	ok, err := d.send(ctx, ms)
	if d.Sent(ms, ok, err); err != nil {
		return fmt.Errorf("%s: sending %d deferred ack(s) on %q: %w", d.broker, len(ms), d.queue, err)
	}
	return nil
}

// flushLingered is the timer's flush of what no receive request carried.
func (d *DeferredAcks[M]) flushLingered() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.flushes.Add(1) // before Close marks d closed: Close waits for it
	d.mu.Unlock()
	defer d.flushes.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = d.Flush(ctx)
}

// Close stops deferring (Add returns false from then on), waits for a flush the linger
// started, and sends what is left.
func (d *DeferredAcks[M]) Close(ctx context.Context) error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.flushes.Wait()
	return d.Flush(ctx)
}
