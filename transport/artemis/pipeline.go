package artemis

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Pipelined settle writes (the default; WithPipelinedSettles, ?pipeline_settles=0 to
// turn off). A settlement with writes sends them unsettled, as PublishConfirmed does,
// and returns: the delivery stays unsettled on the broker until every write is
// accepted, and is accepted only then, from a goroutine of its own. A write refused,
// failed or not accepted within the confirm timeout makes that goroutine give the
// delivery back (modified, not counted against max-delivery-attempts, after a hold that
// grows while writes keep failing), so the broker delivers it again. The worker is free
// for the next delivery meanwhile, so the writes of many deliveries share the broker's
// journal syncs instead of each worker waiting for its own.
//
// A pipelined delivery is finished in the ledger (its prefetch slot is free) but not on
// the broker, so the receiver manages its link credit itself: credit is issued for the
// deliveries the ledger may still hand out, not withheld for the ones whose writes are
// in flight (go-amqp's automatic credit counts every unsettled delivery). The
// settlements in flight are bounded by the consumer's pipe.

// pipeDepth bounds the pipelined settlements in flight of one consumer: enough writes
// in flight at once to fill the broker's journal syncs, and never fewer than the
// prefetch.
const pipeDepth = 256

// settleHoldMin is the hold before a delivery whose pipelined write failed is given
// back after the first failure; it doubles while writes keep failing, up to
// WithMaxBackoff (at least settleHoldMin), so a write the broker keeps refusing never
// spins the handler.
const settleHoldMin = 250 * time.Millisecond

// sentWrite is one settle write sent and not yet answered.
type sentWrite struct {
	r     amqp.SendReceipt
	queue string
}

// sendWrites transfers the settle writes ws unsettled, in order, without waiting for
// their outcomes. It stops at the first that cannot be sent and returns it as a
// *transport.SettleWriteError; the writes sent before it stay in flight (a redelivery
// repeats them: a duplicate at worst, never a loss).
func (t *Transport) sendWrites(ctx context.Context, ws []*transport.Message) ([]sentWrite, error) {
	sent := make([]sentWrite, 0, len(ws))
	for _, w := range ws {
		if err := ctx.Err(); err != nil {
			return nil, &transport.SettleWriteError{Queue: w.Queue, Err: err}
		}
		r, err := t.transfer(ctx, w)
		if err != nil {
			return nil, &transport.SettleWriteError{Queue: w.Queue, Err: err}
		}
		sent = append(sent, sentWrite{r: r, queue: w.Queue})
	}
	return sent, nil
}

// awaitWrites waits for the outcome of every write in sent and returns nil when each
// was accepted, else the first failure (a *transport.SettleWriteError).
func awaitWrites(ctx context.Context, sent []sentWrite) error {
	for _, w := range sent {
		state, err := w.r.Wait(ctx)
		if err != nil {
			return &transport.SettleWriteError{Queue: w.queue, Err: fmt.Errorf("artemis: confirm of write to %q: %w", w.queue, err)}
		}
		if err := accepted(w.queue, state); err != nil {
			return &transport.SettleWriteError{Queue: w.queue, Err: err}
		}
	}
	return nil
}

// settlePipelined is an Ack with writes when settle writes are pipelined. It returns
// once the writes are sent (or with the error of one that could not be sent: nothing is
// accepted then and the runtime rewinds the delivery); the delivery is accepted, or
// given back, by [consumer.finishPipelined] once their outcomes are in.
func (c *consumer) settlePipelined(ctx context.Context, h handle, d *transport.Delivery, st transport.Settlement) error {
	ws := st.Writes
	select {
	case c.pipe <- struct{}{}:
	case <-ctx.Done():
		return &transport.SettleWriteError{Queue: ws[0].Queue, Err: ctx.Err()}
	}
	sent, err := c.t.sendWrites(ctx, ws)
	if err != nil {
		<-c.pipe
		return err
	}
	c.pending.Add()
	c.t.pending.Add()
	go c.finishPipelined(h, d, st, sent)
	return nil
}

// finishPipelined waits, up to the confirm timeout, for the writes of one pipelined
// settlement, then accepts the delivery, or gives it back when a write failed.
func (c *consumer) finishPipelined(h handle, d *transport.Delivery, st transport.Settlement, sent []sentWrite) {
	defer c.t.pending.Done()
	defer c.pending.Done()
	defer func() { <-c.pipe }()
	ctx, cancel := context.WithTimeout(context.Background(), c.t.opts.confirmTimeout)
	err := awaitWrites(ctx, sent)
	cancel()
	// A fresh bound for the disposition: the writes may have used up the first.
	ctx, cancel = context.WithTimeout(context.Background(), c.t.opts.confirmTimeout)
	defer cancel()
	if err != nil {
		if c.failed != nil {
			c.failed(d, st, err)
		}
		c.writeFailed(ctx, h, err)
		return
	}
	c.holdMu.Lock()
	recovered := c.failures
	c.failures = 0
	c.holdMu.Unlock()
	if recovered > 0 {
		c.t.log.Info("artemis: settle writes accepted again", "queue", c.queue, "failed_before", recovered)
	}
	if err := h.recv.AcceptMessage(ctx, h.msg); err != nil {
		// The broker took the delivery back with its link and delivers it again; its
		// writes are made, so the redelivery repeats them.
		c.t.log.Warn("artemis: settle writes made for a delivery the broker takes back (its link is gone); it is delivered again",
			"queue", c.queue, "err", err)
	}
}

// writeFailed gives back the delivery of a pipelined settlement whose write failed,
// after the hold: modified without delivery-failed, as the Rewind of a delivery whose
// Ack failed is, so a refused write does not count against max-delivery-attempts.
func (c *consumer) writeFailed(ctx context.Context, h handle, err error) {
	c.holdMu.Lock()
	c.failures++
	n := c.failures
	c.holdMu.Unlock()
	hold := min(settleHoldMin<<min(n-1, 10), max(c.t.opts.maxBackoff, settleHoldMin))
	if n&(n-1) == 0 { // at the first failure and at each doubling of the count
		c.t.log.Warn("artemis: settle write failed; the delivery is given back to the broker after a hold",
			"queue", c.queue, "failures_in_a_row", n, "hold", hold, "err", err)
	}
	timer := time.NewTimer(hold)
	select {
	case <-timer.C:
	case <-c.book.Done(): // closing: give it back now
		timer.Stop()
	}
	if merr := h.recv.ModifyMessage(ctx, h.msg, &amqp.ModifyMessageOptions{}); merr != nil && !linkGone(merr) && !errors.Is(merr, context.DeadlineExceeded) {
		c.t.log.Warn("artemis: cannot give back a delivery whose settle write failed; the broker redelivers it when its link closes",
			"queue", c.queue, "err", merr)
	}
}
