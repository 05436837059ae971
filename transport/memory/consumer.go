package memory

import (
	"context"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/ledger"
	"github.com/babelqueue-go/babelqueue/transport"
)

type consumer struct {
	t     *Transport
	queue string
	q     *queue                  // t.queues[queue]: a queue, once made, is never removed
	book  *ledger.Ledger[*Stored] // the slots and settle state; closed with t.mu held
}

// delivery is a delivery and its ledger entry, made in one allocation.
type delivery struct {
	d transport.Delivery
	e ledger.Entry[*Stored]
}

func (c *consumer) Receive(ctx context.Context) (*transport.Delivery, error) {
	return c.book.Receive(ctx, c.take)
}

// closedLocked reports whether the broker or this consumer is closed.
func (c *consumer) closedLocked() bool {
	select {
	case <-c.book.Done():
		return true
	default:
		return c.t.closed
	}
}

func (c *consumer) take(ctx context.Context) (*transport.Delivery, error) {
	t := c.t
	for {
		t.mu.Lock()
		if c.closedLocked() {
			t.mu.Unlock()
			return nil, transport.ErrClosed
		}
		q := c.q
		var next time.Time
		if len(q.delayed) > 0 {
			next = q.promoteDueLocked(t.now())
		}
		if len(q.ready) > 0 {
			s := q.ready[0]
			h := new(delivery)
			if err := c.book.HandInto(&h.e, s); err != nil { // never fails: the book closes with t.mu held
				t.mu.Unlock()
				return nil, err
			}
			q.ready[0] = nil
			q.ready = q.ready[1:]
			s.inFlight = true
			q.inflight++
			d := &h.d
			*d = transport.Delivery{
				Queue:             c.queue,
				Body:              s.Body[:len(s.Body):len(s.Body)], // never changed: a write stores a copy
				Key:               cloneKey(s.Key),
				Headers:           s.Headers, // shared and read-only: see the package doc
				Redeliveries:      s.Redeliveries,
				AttemptsHeader:    s.Attempts,
				HasAttemptsHeader: true,
				Handle:            &h.e,
			}
			if t.caps.SchemaGate {
				d.SchemaVersion = s.SchemaVersion
			}
			t.mu.Unlock()
			return d, nil
		}
		wake := q.wake
		t.mu.Unlock()
		var timer *time.Timer
		var due <-chan time.Time
		if !next.IsZero() {
			timer = time.NewTimer(time.Until(next))
			due = timer.C
		}
		var err error
		select {
		case <-wake:
		case <-due:
		case <-ctx.Done():
			err = ctx.Err()
		case <-c.book.Done():
			err = transport.ErrClosed
		}
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return nil, err
		}
	}
}

// promoteDueLocked moves the delayed messages due at now to the ready ones and returns
// when the next of the others is due (zero when none is left).
func (q *queue) promoteDueLocked(now time.Time) (next time.Time) {
	kept := q.delayed[:0]
	for _, s := range q.delayed {
		if !s.DueAt.After(now) {
			q.ready = append(q.ready, s)
			continue
		}
		if next.IsZero() || s.DueAt.Before(next) {
			next = s.DueAt
		}
		kept = append(kept, s)
	}
	clear(q.delayed[len(kept):])
	q.delayed = kept
	return next
}

func (c *consumer) Settle(_ context.Context, d *transport.Delivery, s transport.Settlement) error {
	e, err := c.book.Begin(d, s)
	if err != nil {
		return err
	}
	c.t.mu.Lock()
	err = c.settleLocked(e.Value, s)
	c.t.mu.Unlock()
	return c.book.Finish(e, s, err)
}

// settleLocked finishes a delivery: the writes and the acknowledgement happen together
// or not at all.
func (c *consumer) settleLocked(stored *Stored, s transport.Settlement) error {
	t := c.t
	q := c.q
	switch s.Outcome {
	case transport.Ack:
		if t.closed {
			return &transport.SettleWriteError{Queue: c.queue, Err: transport.ErrClosed}
		}
		if len(s.Writes) > 0 {
			if err := c.writeAllLocked(s.Writes); err != nil {
				return err
			}
		}
	case transport.Rewind:
		stored.Redeliveries++
		q.ready = append([]*Stored{stored}, q.ready...)
		q.notify()
	case transport.HandOff:
		stored.Redeliveries++
		q.handedOff = append(q.handedOff, stored)
	}
	q.settled(stored)
	return nil
}

// writeAllLocked makes the writes of an Ack: all of them or none.
func (c *consumer) writeAllLocked(writes []*transport.Message) error {
	t := c.t
	// All writes or none: check every write against the fault hook first.
	for _, m := range writes {
		err := transport.CheckSize("memory", m.Queue, len(m.Body), t.maxSize)
		if err == nil && t.fail != nil {
			err = t.fail(m)
		}
		if err != nil {
			return &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
	}
	fail := t.fail
	t.fail = nil
	defer func() { t.fail = fail }()
	for _, m := range writes {
		if err := t.writeLocked(m); err != nil {
			return &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
	}
	return nil
}

// Close stops the consumer; deliveries it handed out and did not settle go back to
// the front of the queue, in the order they were handed out, with a higher redelivery
// count.
func (c *consumer) Close(context.Context) error {
	t := c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	back := c.book.Close()
	q := c.q
	for i := len(back) - 1; i >= 0; i-- {
		s := back[i]
		q.settled(s)
		s.Redeliveries++
		q.ready = append([]*Stored{s}, q.ready...)
	}
	q.notify()
	return nil
}
