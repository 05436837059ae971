package driverkit

import (
	"context"
	"errors"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Pipelined settle writes ([Config.Pipeline]). Settle of an Ack with writes takes a
// token of the pipeline (waiting while PipelineDepth settlements are in flight), hands
// the writes to the broker ([Writer.Write]) and returns; the delivery is finished in
// the ledger then (its slot is free, a second Settle fails), while the broker still
// holds it unacknowledged. A goroutine waits for the writes' confirmation and then
// acknowledges the delivery, or, when a write failed, gives it back ([SettleFailed])
// so that the broker delivers it again, tells ConsumeOptions.SettleFailed, and makes
// receiving back off as after a failed settlement. Nothing is acknowledged without its
// writes; a write made before one that failed may be made again (a duplicate at worst,
// never a loss). The worker is free for the next delivery meanwhile, so the
// confirmations of many settlements share the broker's round trips and journal syncs.
//
// Pipelined acknowledgements ([Config.PipelineAcks]) are the same with no writes: the
// goroutine makes the acknowledgement, and one that fails gives the delivery back.

// settlePipelined hands the writes over and starts the wait for their confirmation.
// An error it returns acknowledged nothing and left nothing in flight.
func (c *Consumer[M]) settlePipelined(ctx context.Context, m M, d *transport.Delivery, s transport.Settlement) error {
	select {
	case c.pipe <- struct{}{}:
	default:
		select {
		case c.pipe <- struct{}{}:
		case <-ctx.Done():
			return writeErr(ctx.Err(), s.Writes)
		}
	}
	if c.async != nil && len(s.Writes) > 0 {
		c.busy.enter()
		err := c.async.WriteAsync(ctx, m, s.Writes, func(err error) {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ConfirmTimeout)
			defer cancel()
			c.finishPipelined(ctx, m, d, s, writeErr(err, s.Writes))
		})
		if err != nil {
			c.busy.exit()
			<-c.pipe
			return writeErr(err, s.Writes)
		}
		return nil
	}
	var confirm Confirm
	if len(s.Writes) > 0 {
		var err error
		if confirm, err = c.w.Write(ctx, m, s.Writes); err != nil {
			<-c.pipe
			return writeErr(err, s.Writes)
		}
	}
	c.busy.enter()
	go c.awaitPipelined(m, d, s, confirm)
	return nil
}

// awaitPipelined waits, up to the confirm timeout, for the writes of one pipelined
// settlement, then acknowledges its delivery or gives it back.
func (c *Consumer[M]) awaitPipelined(m M, d *transport.Delivery, s transport.Settlement, confirm Confirm) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ConfirmTimeout)
	defer cancel()
	var err error
	if confirm != nil {
		err = writeErr(confirm(ctx), s.Writes)
	}
	if ctx.Err() != nil {
		// A fresh bound for the acknowledgement or give-back: the wait used up the first.
		var again context.CancelFunc
		ctx, again = context.WithTimeout(context.Background(), c.cfg.ConfirmTimeout)
		defer again()
	}
	c.finishPipelined(ctx, m, d, s, err)
}

// finishPipelined acknowledges the delivery of a pipelined settlement whose writes are
// confirmed (err nil), or gives it back, bounded by ctx, and frees its place in the
// pipeline.
func (c *Consumer[M]) finishPipelined(ctx context.Context, m M, d *transport.Delivery, s transport.Settlement, err error) {
	defer c.busy.exit()
	defer func() { <-c.pipe }()
	if c.driverClosed.Load() {
		return // Close gave up waiting: the driver's side is closed and the broker redelivers
	}
	if err == nil {
		aerr := c.d.Ack(ctx, m)
		if aerr == nil {
			c.book.SettleSucceeded()
			return
		}
		if errors.Is(aerr, transport.ErrAlreadySettled) {
			// Taken back by the broker (a channel or link gone), after its writes were
			// made, if any: it is delivered again and its writes are made again.
			c.cfg.Logger.Warn(c.cfg.Broker+": a pipelined settlement could not be acknowledged; the broker delivers it again",
				"queue", c.cfg.Queue, "writes", len(s.Writes), "error", aerr)
			return
		}
		err = aerr
	}
	if gerr := c.d.GiveBack(ctx, []M{m}, SettleFailed); gerr != nil {
		c.cfg.Logger.Warn(c.cfg.Broker+": cannot give back a delivery whose pipelined settlement failed; the broker redelivers it after its own timeout",
			"queue", c.cfg.Queue, "error", gerr)
	}
	if c.failed != nil {
		c.failed(d, s, err)
	}
	c.book.SettleFailed(transport.Ack, err)
}
