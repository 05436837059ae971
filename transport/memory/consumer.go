package memory

import (
	"context"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// consumer is the memory broker's side of a consumer: the primitives the kit's
// [driverkit.Consumer] drives. A settlement's writes and its acknowledgement happen
// together, under the broker's lock, or not at all.
type consumer struct {
	t     *Transport
	queue string
	q     *queue // t.queues[queue]: a queue, once made, is never removed
	kit   *driverkit.Consumer[*Stored]
}

// Receive takes up to len(into) ready messages, waiting for one (or for a delayed one
// to fall due).
func (c *consumer) Receive(ctx context.Context, into []*Stored) (int, error) {
	t := c.t
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return 0, transport.ErrClosed
		}
		q := c.q
		var next time.Time
		if len(q.delayed) > 0 {
			next = q.promoteDueLocked(t.now())
		}
		if len(q.ready) > 0 {
			n := 0
			for ; n < len(into) && len(q.ready) > 0; n++ {
				s := q.ready[0]
				q.ready[0] = nil
				q.ready = q.ready[1:]
				s.inFlight = true
				q.inflight++
				into[n] = s
			}
			t.mu.Unlock()
			return n, nil
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
		case <-c.kit.Done():
			err = transport.ErrClosed
		}
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return 0, err
		}
	}
}

// Decode hands out the stored message: its body is the stored bytes (never changed: a
// write stores a copy), its headers the stored map (shared and read-only: see the
// package doc).
func (c *consumer) Decode(s *Stored, d *transport.Delivery) {
	d.Body = s.Body[:len(s.Body):len(s.Body)]
	d.Key = cloneKey(s.Key)
	d.Headers = s.Headers
	d.Redeliveries = s.Redeliveries
	d.AttemptsHeader, d.HasAttemptsHeader = s.Attempts, true
	if c.t.caps.SchemaGate {
		d.SchemaVersion = s.SchemaVersion
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

// Ack deletes the message.
func (c *consumer) Ack(ctx context.Context, s *Stored) error { return c.AckWrites(ctx, s, nil) }

// AckWrites makes the writes and deletes the message in one step under the broker's
// lock: all of it or nothing.
func (c *consumer) AckWrites(_ context.Context, s *Stored, writes []*transport.Message) error {
	t := c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return &transport.SettleWriteError{Queue: c.queue, Err: transport.ErrClosed}
	}
	if len(writes) > 0 {
		if err := c.writeAllLocked(writes); err != nil {
			return err
		}
	}
	c.q.settled(s)
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

// GiveBack puts the messages back at the front of the queue, in the order they were
// handed out, each with a higher redelivery count.
func (c *consumer) GiveBack(_ context.Context, ms []*Stored, _ driverkit.Reason) error {
	t := c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	q := c.q
	for _, s := range ms {
		q.settled(s)
		s.Redeliveries++
	}
	q.ready = append(append(make([]*Stored, 0, len(ms)+len(q.ready)), ms...), q.ready...)
	q.notify()
	return nil
}

// HandOff hands the message to the (simulated) broker redrive: see [Transport.HandedOff].
func (c *consumer) HandOff(_ context.Context, s *Stored) error {
	t := c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	s.Redeliveries++
	c.q.handedOff = append(c.q.handedOff, s)
	c.q.settled(s)
	return nil
}

// IsRetryable reports false: the memory broker's receive fails only when it closed.
func (c *consumer) IsRetryable(error) bool { return false }

// Close has nothing of the broker's to release: the kit gave back what was held.
func (c *consumer) Close(context.Context) error { return nil }
