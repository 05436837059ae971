package pulsar

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Pipelined settle writes (the default; WithPipelinedSettles, ?pipeline_settles=0 to
// turn off). A settlement with writes hands them to their topics' producers
// (SendAsync) and returns: the delivery stays unacknowledged until the broker's receipt
// of every write is in, and is acknowledged (awaited, as an Ack always is) only then,
// from a goroutine of its own. A write that fails, or is not confirmed within the send
// timeout, makes that goroutine rewind the delivery (a negative acknowledgement, as a
// Rewind is), so the broker delivers it again after the nack delay: nothing is
// acknowledged without its writes, and a write made before the failure may be made
// again (a duplicate at worst, never a loss). The worker is free for the next delivery
// meanwhile, so many settlements' writes are on the wire at once instead of each
// worker waiting a round trip for its own.
//
// For the ledger the delivery is settled when Settle returns (its prefetch slot is
// free, a second Settle fails with ErrAlreadySettled). Pulsar does not count an
// unacknowledged delivery against the receiver queue, so the consumer receives on
// meanwhile; the settlements in flight are bounded by the consumer's pipeline, and
// Close waits for them.

// pipeDepth bounds one consumer's pipelined settlements in flight (never fewer than
// its prefetch): enough to keep a producer's writes on the wire while the workers go
// on, within the producer's default pending queue (1000 messages).
const pipeDepth = 256

// pipelined is one settlement whose writes are in flight.
type pipelined struct {
	c     *consumer
	msg   pc.Message
	d     *transport.Delivery  // what Settle was given, for ConsumeOptions.SettleFailed
	st    transport.Settlement // ditto
	left  atomic.Int32         // receipts still awaited, plus one while the writes are handed over
	over  atomic.Bool          // finished: acked or rewound (or about to be)
	timer *time.Timer
}

// receipt records the outcome of one write to queue made through p.
func (s *pipelined) receipt(queue string, p pc.Producer, err error) {
	if err != nil {
		// As after a failed synchronous write: the next write gets a new producer.
		s.c.t.dropProducer(queue, p)
		s.finish(&transport.SettleWriteError{Queue: queue, Err: fmt.Errorf("pulsar: write to %q: %w", queue, err)})
		return
	}
	if s.left.Add(-1) == 0 {
		s.finish(nil)
	}
}

// finish ends the settlement once: it acks the delivery (err nil) or rewinds it, from a
// goroutine of its own (a receipt comes on the client's connection goroutine, which
// must not wait for the ack's response).
func (s *pipelined) finish(err error) {
	if !s.over.CompareAndSwap(false, true) {
		return
	}
	s.timer.Stop()
	go s.c.finishPipelined(s, err)
}

// expire ends the settlement when its receipts are not all in within the send timeout
// (the timer's own goroutine: it leaves the timer alone).
func (s *pipelined) expire(queue string, timeout time.Duration) {
	if !s.over.CompareAndSwap(false, true) {
		return
	}
	s.c.finishPipelined(s, &transport.SettleWriteError{Queue: queue,
		Err: fmt.Errorf("pulsar: no receipt for a settle write to %q within the send timeout (%s): %w", queue, timeout, context.DeadlineExceeded)})
}

// settlePipelined is an Ack with writes when settle writes are pipelined. It checks
// every write and finds its producer before it hands any over, so an error it returns
// (a *transport.SettleWriteError) means nothing was written or acknowledged and the
// runtime rewinds the delivery; once it returns nil the delivery is acknowledged, or
// rewound, by [consumer.finishPipelined] when the writes' receipts are in.
func (c *consumer) settlePipelined(ctx context.Context, msg pc.Message, d *transport.Delivery, st transport.Settlement) error {
	ws := st.Writes
	pms := make([]*pc.ProducerMessage, len(ws))
	for i, m := range ws {
		if f := c.t.settleFault.Load(); f != nil {
			if err := (*f)(m); err != nil {
				return &transport.SettleWriteError{Queue: m.Queue, Err: err}
			}
		}
		pm, err := c.t.check(m)
		if err != nil {
			return &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
		pms[i] = pm
	}
	if err := c.pipe.Acquire(ctx); err != nil {
		return &transport.SettleWriteError{Queue: ws[0].Queue, Err: err}
	}
	ps := make([]pc.Producer, len(ws))
	for i, m := range ws {
		p, err := c.t.producer(ctx, m.Queue)
		if err != nil {
			c.pipe.Release()
			return &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
		ps[i] = p
	}
	s := &pipelined{c: c, msg: msg, d: d, st: st}
	s.left.Store(int32(len(ws)) + 1)
	q0, timeout := ws[0].Queue, c.t.opts.sendTimeout
	s.timer = time.AfterFunc(timeout, func() { s.expire(q0, timeout) })
	for i, m := range ws {
		if s.over.Load() {
			break // one failed already: the delivery is rewound, the rest need not be made
		}
		q, p := m.Queue, ps[i]
		p.SendAsync(ctx, pms[i], func(_ pc.MessageID, _ *pc.ProducerMessage, err error) {
			s.receipt(q, p, err)
		})
	}
	if s.left.Add(-1) == 0 {
		s.finish(nil)
	}
	return nil
}

// finishPipelined acknowledges the delivery of s once its settle writes are all
// confirmed (err nil), or rewinds it when one failed, then frees the settlement's slot.
func (c *consumer) finishPipelined(s *pipelined, err error) {
	defer c.pipe.Release()
	msg := s.msg
	if err == nil {
		if ackErr := c.pc.Ack(msg); ackErr != nil {
			// The broker redelivers what it never saw acknowledged; the writes stay
			// made (a duplicate, never a loss).
			c.t.log.Warn("pulsar: settle writes made for a delivery whose ack failed; the broker delivers it again",
				"queue", c.queue, "err", ackErr)
			return
		}
		if n := c.pipe.Succeeded(); n > 0 {
			c.t.log.Info("pulsar: settle writes confirmed again", "queue", c.queue, "failed_before", n)
		}
		return
	}
	c.pc.Nack(msg)
	if c.failed != nil {
		c.failed(s.d, s.st, err)
	}
	n, pause := c.pipe.Failed()
	if n&(n-1) == 0 { // at the first failure of a run and at each doubling
		c.t.log.Warn("pulsar: settle write failed; the delivery is delivered again and receiving backs off while settle writes fail",
			"queue", c.queue, "failures", n, "backoff", pause, "err", err)
	}
}
