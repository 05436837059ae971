package kafka

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Settle writes. The kit's Settle of an Ack with writes hands them to the producer
// (Write, WriteAsync) and acknowledges the record (moves its partition's commit mark)
// once every write is confirmed. A write that fails, or is not confirmed within the
// delivery timeout, holds the record's partition back (topics.go) and the kit gives the
// record back, which rewinds it once the hold is over.
//
// Pipelined (the default; WithPipelinedSettles, ?pipeline_settles=0 to turn off), the
// kit's Settle returns once WriteAsync handed the writes over, and their delivery
// promises tell the kit the outcome (driverkit.AsyncWriter: no goroutine waits per
// settlement): the record stays uncommitted (its partition's commit mark stops at it)
// until then, and the worker is free for the next delivery meanwhile, so the writes of
// many deliveries share the producer's batches instead of each worker waiting for its
// own. The settlements in flight are those made during the producer's linger (franz-go's
// default is 10 ms) and a produce round trip: at the pace of the runtime with half its
// handlers failing that is a few thousand, so a consumer holds up to pipeDepth × its
// buffer of them (8192 by default; one buffer's worth, 1024, capped a consumer at about
// 80 thousand writes a second). When they are all taken, when the consumer has nothing
// left to hand out, or when a worker waits for its own writes (not pipelined: Write and
// its Confirm), the producer is hurried (flushed) rather than left to linger: nothing
// more is coming to batch with, and the consumer may be waiting for these very records
// (a retry goes back to its own queue).

// pipeDepth is how many buffers' worth of pipelined settlements a consumer holds in
// flight.
const pipeDepth = 8

// Write hands the settle writes of rec to the producer and returns the wait for their
// delivery reports: the kit uses it for settle writes that are not pipelined, so a
// worker waits, and the producer is hurried. A write that cannot be projected (a bad
// topic name, a record over the size limit) is a *transport.SettleWriteError and
// nothing is written; a record dropped meanwhile by a revoke or a rewind is a
// TakenBackError.
func (c *consumer) Write(ctx context.Context, rec *record, ws []*transport.Message) (driverkit.Confirm, error) {
	w, _, err := c.newWrite(rec, ws)
	if err != nil {
		return nil, err
	}
	w.done = make(chan struct{})
	w.produce(ctx)
	c.t.hurry()
	return w.wait, nil
}

// WriteAsync hands the settle writes of a pipelined settlement to the producer, as
// Write does, and calls done once from their delivery promises (on a goroutine of its
// own after a failure), or with context.DeadlineExceeded when they are not all
// confirmed within the delivery timeout.
func (c *consumer) WriteAsync(ctx context.Context, rec *record, ws []*transport.Message, done func(error)) error {
	w, crowded, err := c.newWrite(rec, ws)
	if err != nil {
		return err
	}
	w.notify = done
	w.timer = time.AfterFunc(c.t.cfg.deliveryTimeout, func() { w.finish(0, context.DeadlineExceeded) })
	w.produce(ctx)
	if crowded {
		c.t.hurry()
	}
	return nil
}

// newWrite projects ws and marks rec as settling; crowded reports that the pipelined
// writes in flight fill the pipeline.
func (c *consumer) newWrite(rec *record, ws []*transport.Message) (w *settleWrite, crowded bool, err error) {
	recs, err := c.t.settleRecords(ws)
	if err != nil {
		return nil, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !inHand(rec) {
		return nil, false, c.takenBack
	}
	c.setLocked(rec, stSettling)
	w = &settleWrite{c: c, rec: rec, ws: ws, recs: recs}
	w.left.Store(int32(len(recs)))
	return w, c.writing >= c.depth, nil
}

// settleWrite is the settle writes of one delivery, produced together.
type settleWrite struct {
	c    *consumer
	rec  *record
	ws   []*transport.Message
	recs []*kgo.Record // ws projected
	left atomic.Int32  // records not confirmed yet
	once sync.Once
	err  error // the first failure, a *DeliveryError
	i    int   // the index of the write that failed
	// Write's: closed once finished. WriteAsync's: the kit's callback, and the timer
	// that gives up at the delivery timeout.
	done   chan struct{}
	notify func(error)
	timer  *time.Timer
}

// produce hands the records to the producer (Transport.produce).
func (w *settleWrite) produce(ctx context.Context) {
	w.c.t.produce(ctx, w.recs, func(i int, err error) {
		switch {
		case err != nil:
			w.finish(i, err)
		case w.left.Add(-1) == 0:
			w.finish(0, nil)
		}
	})
}

// finish ends the write once: with err nil when every record is confirmed, else with
// the failure of record i, after writeFailed held the record's partition back (on a
// goroutine of its own: it may repair the topic through the admin API).
func (w *settleWrite) finish(i int, err error) {
	w.once.Do(func() {
		if w.timer != nil {
			w.timer.Stop()
		}
		if err == nil {
			w.end()
			return
		}
		w.err, w.i = &DeliveryError{Topic: w.recs[i].Topic, Err: err}, i
		go func() {
			w.c.writeFailed(w.rec, w.recs[i].Topic, err)
			w.end()
		}()
	})
}

// end tells the writer's waiter that the write finished.
func (w *settleWrite) end() {
	if w.notify != nil {
		w.notify(w.result())
		return
	}
	close(w.done)
}

// result is the write's outcome: nil, or the first failure as a
// *transport.SettleWriteError wrapping a *DeliveryError.
func (w *settleWrite) result() error {
	if w.err == nil {
		return nil
	}
	return &transport.SettleWriteError{Queue: w.ws[w.i].Queue, Err: w.err}
}

// wait is Write's Confirm: it waits for the delivery reports, up to the delivery
// timeout. A record given up on at the timeout stays buffered and may still be
// written: its record is delivered again meanwhile, so the outcome is a duplicate,
// never a loss.
func (w *settleWrite) wait(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, w.c.t.cfg.deliveryTimeout)
	defer cancel()
	select {
	case <-w.done:
	case <-ctx.Done():
		w.finish(0, ctx.Err())
		<-w.done
	}
	return w.result()
}

// writeFailed hands rec back to its worker after a failed settle write and holds its
// partition back: the give-back that follows rewinds the record only once the hold is
// over, longer with each write to the same topic that fails in a row.
func (c *consumer) writeFailed(rec *record, topic string, cause error) {
	n, counted := c.t.settleWriteFailed(c.ctx, topic, cause)
	hold := holdAfter(n)
	c.mu.Lock()
	if rec.state == stSettling {
		c.setLocked(rec, stHanded)
	}
	if p := rec.p; c.parts[p.tp] == p {
		if until := time.Now().Add(hold); until.After(p.holdUntil) {
			p.holdUntil = until
		}
	}
	c.mu.Unlock()
	if counted { // once per step of the streak, not for every delivery in flight
		c.log.Warn("kafka: settle write failed; the record's partition is held back before it is delivered again",
			"topic", topic, "failures_in_a_row", n, "hold", hold, "partition", rec.r.Partition, "offset", rec.r.Offset, "err", cause)
	}
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
