package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Settle writes: the kit hands them over with Write (awaited) or WriteAsync (pipelined)
// and acknowledges the record once every write is confirmed. A write that fails holds
// the record's partition back (topics.go) before the give-back rewinds it. The producer
// is hurried (flushed) when a worker waits for its writes, when pipeDepth × the buffer
// of settlements are in flight, and when the consumer has nothing to hand out while
// writes are in flight (docs/transports/kafka.md, Settle writes).

// pipeDepth is how many buffers' worth of pipelined settlements a consumer holds in
// flight.
const pipeDepth = 8

// Write hands the settle writes of rec to the producer, hurries it and returns the wait
// for their delivery reports. A write that cannot be projected is a
// *transport.SettleWriteError; a record dropped meanwhile is a TakenBackError.
func (c *consumer) Write(ctx context.Context, rec *record, ws []*transport.Message) (driverkit.Confirm, error) {
	w, _, err := c.startWrite(ctx, rec, ws, nil)
	if err != nil {
		return nil, err
	}
	c.t.hurry()
	return w.Wait, nil
}

// WriteAsync is Write for a pipelined settlement: done gets the outcome.
func (c *consumer) WriteAsync(ctx context.Context, rec *record, ws []*transport.Message, done func(error)) error {
	_, crowded, err := c.startWrite(ctx, rec, ws, done)
	if crowded {
		c.t.hurry()
	}
	return err
}

// startWrite projects ws, marks rec as settling and produces the records; crowded
// reports that the pipelined writes in flight fill the pipeline.
func (c *consumer) startWrite(ctx context.Context, rec *record, ws []*transport.Message, done func(error)) (*driverkit.Confirmations, bool, error) {
	recs, err := c.t.settleRecords(ctx, ws)
	if err != nil {
		return nil, false, err
	}
	c.mu.Lock()
	if !rec.InHand() {
		c.mu.Unlock()
		return nil, false, c.takenBack
	}
	c.lc.Offsets.Set(rec, driverkit.LogSettling)
	crowded := c.lc.Offsets.Writing() >= c.depth
	c.mu.Unlock()
	w := driverkit.NewConfirmations(len(recs), c.t.cfg.deliveryTimeout, func(i int, err error) error {
		c.writeFailed(rec, recs[i].Topic, err)
		return &transport.SettleWriteError{Queue: ws[i].Queue, Err: &DeliveryError{Topic: recs[i].Topic, Err: err}}
	}, done)
	c.t.produce(ctx, recs, w)
	return w, crowded, nil
}

// writeFailed hands rec back to its worker after a failed settle write and holds its
// partition back, longer with each write to the same topic that fails in a row.
func (c *consumer) writeFailed(rec *record, topic string, cause error) {
	n, counted := c.t.settleWriteFailed(c.ctx, topic, cause)
	hold := writeHold.Delay(n)
	c.mu.Lock()
	if rec.State == driverkit.LogSettling {
		c.lc.Offsets.Set(rec, driverkit.LogHanded)
	}
	if p := rec.p; c.lc.Owns(p.tp, p) {
		p.Hold(time.Now().Add(hold))
	}
	c.mu.Unlock()
	if counted { // once per step of the streak, not for every delivery in flight
		c.log.Warn("kafka: settle write failed; the record's partition is held back before it is delivered again",
			"topic", topic, "failures_in_a_row", n, "hold", hold, "partition", rec.r.Partition, "offset", rec.r.Offset, "err", cause)
	}
}

// settleRecords projects the writes of a settlement; one that cannot be projected is a
// *transport.SettleWriteError.
func (t *Transport) settleRecords(ctx context.Context, ws []*transport.Message) ([]*kgo.Record, error) {
	recs := make([]*kgo.Record, len(ws))
	now := time.Now()
	for i, m := range ws {
		r, err := t.record(ctx, m, now)
		if err != nil {
			return nil, &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
		recs[i] = r
	}
	return recs, nil
}

// hurry flushes the producer in the background (no record lingers meanwhile), unless a
// hurry is under way or the transport is closed; the flush waits at most the delivery
// timeout.
func (t *Transport) hurry() {
	if !t.hurrying.CompareAndSwap(false, true) {
		return
	}
	if !t.background(func() {
		defer t.hurrying.Store(false)
		ctx, cancel := context.WithTimeout(t.bg, t.cfg.deliveryTimeout)
		defer cancel()
		_ = t.prod.Flush(ctx)
	}) {
		t.hurrying.Store(false)
	}
}
