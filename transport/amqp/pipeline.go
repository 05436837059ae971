package amqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Pipelined settle writes (the default; WithPipelinedSettles, ?pipeline_settles=0 to
// turn off). A settlement with writes publishes them in confirm mode and returns: the
// delivery stays unacknowledged until every write is confirmed, then it is acked; a
// write that is nacked, lost with its channel, or not confirmed within the confirm
// timeout makes the transport nack the delivery with requeue (a rewind) instead. The
// worker is free for the next delivery meanwhile, so the confirms of many settlements
// share the broker's journal flushes instead of each worker waiting for its own.
//
// For the ledger the delivery is settled when Settle returns (its slot is free, a second
// Settle fails with ErrAlreadySettled); the broker still counts it against the channel's
// prefetch until the ack or nack. A channel that dies meanwhile requeues the delivery by
// itself: nothing is acked on it, and the writes made for it may stay (a duplicate at
// worst, never a loss).

// settlePipelined is an Ack with writes when settle writes are pipelined: it publishes
// the writes and returns; awaitWrites acks or rewinds the delivery once they are
// confirmed or failed. An error returned here acknowledged nothing and left nothing in
// flight (writes published before a failed publish may stay: a duplicate at worst).
func (c *consumer) settlePipelined(ctx context.Context, h handle, d *transport.Delivery, st transport.Settlement) error {
	ws := st.Writes
	if h.s.ch.IsClosed() {
		return c.lost(nil)
	}
	for _, m := range ws {
		if err := transport.CheckSize("amqp", m.Queue, len(m.Body), c.t.s.maxSize); err != nil {
			return &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
	}
	if err := c.pipe.Acquire(ctx); err != nil {
		return &transport.SettleWriteError{Queue: ws[0].Queue, Err: err}
	}
	ss, err := c.t.publishWrites(ctx, ws)
	if err != nil {
		c.pipe.Release()
		return err
	}
	go c.awaitWrites(h, d, st, ss)
	return nil
}

// publishWrites publishes ms on one confirm channel, which goes back to the idle list
// at once for other writers, and returns them as sent. Any failure is a
// *transport.SettleWriteError.
func (t *Transport) publishWrites(ctx context.Context, ms []*transport.Message) ([]sent, error) {
	pc, err := t.getPub(ctx)
	if err != nil {
		return nil, &transport.SettleWriteError{Queue: ms[0].Queue, Err: err}
	}
	defer t.putPub(pc)
	ss := make([]sent, 0, len(ms))
	for _, m := range ms {
		s, err := t.send(ctx, pc, m, true)
		if err == nil && s.dc == nil {
			err = errors.New("amqp: channel is not in confirm mode")
			ss = append(ss, s)
		}
		if err != nil {
			t.checkReturns(ss, failedAll(len(ss), err)) // resolves what was registered
			return nil, &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
		ss = append(ss, s)
	}
	return ss, nil
}

// failedAll is n copies of err.
func failedAll(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// awaitWrites waits for the confirms of one pipelined settlement, up to the confirm
// timeout, then acks the delivery (every write confirmed and none returned) or nacks it
// with requeue.
func (c *consumer) awaitWrites(h handle, d *transport.Delivery, st transport.Settlement, ss []sent) {
	defer c.pipe.Release()
	err := c.t.confirmed(st.Writes, ss)
	if err == nil {
		if ackErr := h.s.ch.Ack(h.tag, false); ackErr != nil {
			// The channel died after the writes were made: the broker redelivers the
			// delivery, and its writes stay (a duplicate, never a loss).
			c.t.log.Warn("amqp: settle writes made for a delivery whose channel closed; the broker redelivers it",
				"queue", c.queue, "err", ackErr)
			return
		}
		if n := c.pipe.Succeeded(); n > 0 {
			c.t.log.Info("amqp: settle writes confirmed again", "queue", c.queue, "failed_before", n)
		}
		return
	}
	// A channel that died meanwhile requeued the delivery by itself; the nack then fails
	// and changes nothing.
	nackErr := h.s.ch.Nack(h.tag, false, true)
	if c.failed != nil {
		c.failed(d, st, err)
	}
	if nackErr != nil {
		return // the channel (and most likely the connection) went: the consumer resumes
	}
	n, pause := c.pipe.Failed()
	if n&(n-1) == 0 { // at the first failure of a run and at each doubling
		c.t.log.Warn("amqp: settle write failed; the delivery is delivered again and receiving backs off while settle writes fail",
			"queue", c.queue, "failures", n, "backoff", pause, "err", err)
	}
}

// confirmed waits for every confirm of ss under one deadline (the confirm timeout), then
// checks that none was returned, and returns the first failure as a
// *transport.SettleWriteError.
func (t *Transport) confirmed(ws []*transport.Message, ss []sent) error {
	err := t.awaitSent(ws, ss)
	if err != nil {
		t.checkReturns(ss, failedAll(len(ss), err))
		return err
	}
	errs := make([]error, len(ss))
	t.checkReturns(ss, errs)
	for i, err := range errs {
		if err != nil {
			return &transport.SettleWriteError{Queue: ws[i].Queue, Err: err}
		}
	}
	return nil
}

// awaitSent waits for the confirms of ss and returns the first that failed as a
// *transport.SettleWriteError.
func (t *Transport) awaitSent(ws []*transport.Message, ss []sent) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for i, s := range ss {
		dc := s.dc
		select {
		case <-dc.Done():
		default:
			if timer == nil {
				timer = time.NewTimer(t.s.confirmTimeout)
			}
			select {
			case <-dc.Done():
			case <-timer.C:
				return &transport.SettleWriteError{Queue: ws[i].Queue,
					Err: fmt.Errorf("amqp: waiting for the confirm of a write to %q: %w", ws[i].Queue, context.DeadlineExceeded)}
			}
		}
		if !dc.Acked() {
			return &transport.SettleWriteError{Queue: ws[i].Queue, Err: errNacked}
		}
	}
	return nil
}
