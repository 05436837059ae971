package kafka

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Pipelined settle writes (the default; WithPipelinedSettles, ?pipeline_settles=0 to
// turn off). A settlement with writes hands them to the producer and returns: the
// record stays uncommitted (its partition's commit mark stops at it) until every write
// is confirmed, and a write that fails, or is not confirmed within the delivery
// timeout, rewinds the record from here, after the partition's hold. The worker is free
// for the next delivery meanwhile, so the writes of many deliveries share the
// producer's batches instead of each worker waiting for its own.
//
// The settlements in flight are those made during the producer's linger (franz-go's
// default is 10 ms) and a produce round trip: at the pace of the runtime with half its
// handlers failing that is a few thousand, so a consumer holds up to pipeDepth × its
// buffer of them (8192 by default; one buffer's worth, 1024, capped a consumer at about
// 80 thousand writes a second). When they are all taken, or when the consumer has
// nothing left to hand out, the producer is hurried (flushed) rather than left to
// linger: nothing more is coming to batch with, and the consumer may be waiting for
// these very records (a retry goes back to its own queue).

// pipeDepth is how many buffers' worth of pipelined settlements a consumer holds in
// flight.
const pipeDepth = 8

// asyncWrite is the settle writes of one delivery, produced together.
type asyncWrite struct {
	left  atomic.Int32
	once  sync.Once
	timer *time.Timer
	done  func(topic string, err error)
}

func (w *asyncWrite) finish(topic string, err error) {
	w.once.Do(func() {
		w.timer.Stop()
		w.done(topic, err)
	})
}

// settleRecords projects the writes of a settlement; a write that cannot be projected
// (a bad topic name, a record over the size limit) is a *transport.SettleWriteError.
func (t *Transport) settleRecords(ws []*transport.Message) ([]*kgo.Record, error) {
	recs := make([]*kgo.Record, len(ws))
	now := time.Now()
	for i, m := range ws {
		r, err := t.record(m, now)
		if err != nil {
			return nil, &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
		recs[i] = r
	}
	return recs, nil
}

// produceAsync produces recs and calls done once: with nil when every record is
// confirmed, else with the topic and error of the first failure, or with
// context.DeadlineExceeded when they are not all confirmed within the delivery timeout
// (a record given up on that way stays buffered and may still be written: a duplicate
// at worst, never a loss). done runs on a goroutine of its own after a failure.
//
// The records go into the producer's buffer at once when there is room for all of them
// (producerRoom), with ctx's values but not its cancellation (as a Publish does:
// franz-go fails every record buffered behind one whose context ends, and cancelling
// nothing spares it watching one). Otherwise they wait for room in order on a goroutine
// of their own until ctx ends; the caller's slot in the consumer's pipe bounds what waits
// that way. (A producer that also bounds its buffer in bytes keeps no room: franz-go
// refuses a record when the buffer is full, ErrMaxBuffered, and produceUncancelled hands
// it over again from a goroutine of its own.)
func (t *Transport) produceAsync(ctx context.Context, recs []*kgo.Record, done func(topic string, err error)) {
	w := &asyncWrite{}
	w.done = func(topic string, err error) {
		if err == nil {
			done("", nil)
			return
		}
		go done(topic, err)
	}
	w.left.Store(int32(len(recs)))
	w.timer = time.AfterFunc(t.cfg.deliveryTimeout, func() {
		w.finish(recs[0].Topic, &DeliveryError{Topic: recs[0].Topic, Err: context.DeadlineExceeded})
	})
	if err := ctx.Err(); err != nil {
		w.finish(recs[0].Topic, &DeliveryError{Topic: recs[0].Topic, Err: err})
		return
	}
	confirmed := func(r *kgo.Record, err error) {
		t.room.free()
		if err != nil {
			w.finish(r.Topic, &DeliveryError{Topic: r.Topic, Err: err})
			return
		}
		t.delivered(r.Topic)
		t.settleWriteConfirmed(r.Topic)
		if w.left.Add(-1) == 0 {
			w.finish("", nil)
		}
	}
	uctx := context.WithoutCancel(ctx)
	switch {
	case t.room == nil:
		buffered := func(r *kgo.Record, err error) {
			if err != nil && errors.Is(err, kgo.ErrMaxBuffered) {
				go t.produceUncancelled(ctx, r, confirmed)
				return
			}
			confirmed(r, err)
		}
		for _, r := range recs {
			t.prod.TryProduce(uctx, r, buffered)
		}
	case t.room.take(t.prod, len(recs)):
		for _, r := range recs {
			t.prod.Produce(uctx, r, confirmed)
		}
	default:
		// No room now: the records wait for it, in order, on a goroutine of their own.
		go func() {
			for _, r := range recs {
				if err := t.room.wait(ctx); err != nil {
					w.finish(r.Topic, &DeliveryError{Topic: r.Topic, Err: err})
					return
				}
				t.prod.Produce(uctx, r, confirmed)
			}
		}()
	}
}

// settlePipelined is an Ack with writes when settle writes are pipelined: rec is in
// stSettling (the caller set it, under c.mu, and released the lock).
func (c *consumer) settlePipelined(ctx context.Context, rec *record, d *transport.Delivery, st transport.Settlement) error {
	ws := st.Writes
	recs, err := c.t.settleRecords(ws)
	if err == nil {
		select {
		case c.pipe <- struct{}{}:
		default:
			// Full: no slot frees until the producer sends what it holds, so it
			// need not wait out its linger for more.
			c.t.hurry()
			select {
			case c.pipe <- struct{}{}:
			case <-ctx.Done():
				err = &transport.SettleWriteError{Queue: ws[0].Queue, Err: ctx.Err()}
			}
		}
	}
	if err != nil {
		c.mu.Lock()
		if rec.state == stSettling {
			rec.state = stHanded
		}
		c.mu.Unlock()
		return err
	}
	c.pipeWG.Add(1)
	c.t.produceAsync(ctx, recs, func(topic string, err error) {
		defer c.pipeWG.Done()
		defer func() { <-c.pipe }()
		c.pipelinedDone(rec, topic, err)
		if err != nil && c.failed != nil {
			c.failed(d, st, err)
		}
	})
	return nil
}

// pipelinedDone settles rec once its writes are confirmed, or rewinds it (after its
// partition's hold) when one failed.
func (c *consumer) pipelinedDone(rec *record, topic string, err error) {
	if err == nil {
		c.mu.Lock()
		ok := rec.state == stSettling
		if ok {
			c.ackLocked(rec)
		}
		c.mu.Unlock()
		if !ok {
			c.log.Warn("kafka: settle writes made for a record that will be redelivered (partition revoked or rewound meanwhile)", "topic", rec.r.Topic, "partition", rec.r.Partition, "offset", rec.r.Offset)
		}
		return
	}
	cause := err
	var de *DeliveryError
	if errors.As(err, &de) {
		cause = de.Err
	}
	n, counted := c.t.settleWriteFailed(c.ctx, topic, cause)
	hold := holdAfter(n)
	c.mu.Lock()
	rewound := rec.state == stSettling
	if rewound {
		if p := rec.p; c.parts[p.tp] == p {
			if until := time.Now().Add(hold); until.After(p.holdUntil) {
				p.holdUntil = until
			}
		}
		c.rewindLocked(rec)
	}
	c.mu.Unlock()
	if rewound && counted {
		c.log.Warn("kafka: settle write failed; the record is delivered again after its partition's hold",
			"topic", topic, "failures_in_a_row", n, "hold", hold, "partition", rec.r.Partition, "offset", rec.r.Offset, "err", cause)
	}
}

// awaitPipelined waits, until ctx ends, for the pipelined settle writes in flight.
func (c *consumer) awaitPipelined(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		c.pipeWG.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// hurry has the producer send what it holds without waiting out its linger: it
// flushes the producer in the background (no record lingers while a flush is under
// way), unless a hurry is under way already or the transport is closed. The flush
// waits at most the delivery timeout.
func (t *Transport) hurry() {
	if !t.hurrying.CompareAndSwap(false, true) {
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.hurrying.Store(false)
		return
	}
	t.bgWG.Add(1)
	t.mu.Unlock()
	go func() {
		defer t.bgWG.Done()
		defer t.hurrying.Store(false)
		ctx, cancel := context.WithTimeout(t.bg, t.cfg.deliveryTimeout)
		defer cancel()
		_ = t.prod.Flush(ctx)
	}()
}
