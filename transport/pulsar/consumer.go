package pulsar

import (
	"context"
	"fmt"
	"sync"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue/internal/ledger"
	"github.com/babelqueue-go/babelqueue/internal/settlepipe"
	"github.com/babelqueue-go/babelqueue/transport"
)

// ErrForeignDelivery is returned by Settle for a delivery another consumer handed out.
var ErrForeignDelivery = ledger.ErrForeign

type consumer struct {
	t     *Transport
	queue string
	pc    pc.Consumer
	book  *ledger.Ledger[pc.Message] // the deliveries handed out and not settled
	pipe  *settlepipe.Pipe           // pipelined settlements in flight; nil when not pipelined
	// failed is ConsumeOptions.SettleFailed: told of a pipelined settlement whose writes
	// failed after Settle returned.
	failed func(*transport.Delivery, transport.Settlement, error)
	once   sync.Once
}

// Receive waits for the next message of the subscription. No more than the prefetch
// of deliveries are handed out and unsettled at a time, and while settlements (or
// pipelined settle writes) keep failing Receive backs off.
func (c *consumer) Receive(ctx context.Context) (*transport.Delivery, error) {
	if c.pipe != nil {
		if err := c.pipe.Pause(ctx, c.book.Done()); err != nil {
			return nil, err
		}
	}
	if err := c.book.Acquire(ctx); err != nil {
		return nil, err
	}
	msg, err := c.receive(ctx)
	if err != nil {
		c.book.Unacquire()
		return nil, err
	}
	e, err := c.book.Hand(msg)
	if err != nil {
		// Closed meanwhile: the closed Pulsar consumer gives the message back.
		return nil, err
	}
	d := &transport.Delivery{Queue: c.queue, Handle: e}
	deliveryFields(d, msg)
	return d, nil
}

func (c *consumer) receive(ctx context.Context) (pc.Message, error) {
	// The client's Receive does not watch our close: tie it to the ledger's.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.book.Done():
			cancel()
		case <-rctx.Done():
		}
	}()
	msg, err := c.pc.Receive(rctx)
	if err != nil {
		select {
		case <-c.book.Done():
			return nil, transport.ErrClosed
		default:
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("pulsar: receive from %q: %w", c.queue, err)
	}
	return msg, nil
}

// Settle finishes d. Ack sends every settle write on the topic's producer and waits for
// the broker to confirm each before it acknowledges d; the first write that fails stops
// them, acknowledges nothing and returns a [transport.SettleWriteError] (the writes
// before it stay made). Rewind negatively acknowledges d, so the broker redelivers it
// after the nack redelivery delay with its redelivery count one higher. HandOff is not
// offered: Pulsar has no redrive of its own that the runtime hands work to. With
// pipelined settle writes (the default) an Ack with writes returns once they are handed
// to the producers, and the delivery is acknowledged or rewound when their receipts
// come ([WithPipelinedSettles]).
func (c *consumer) Settle(ctx context.Context, d *transport.Delivery, s transport.Settlement) error {
	e, err := c.book.Begin(d, s)
	if err != nil {
		return err
	}
	if c.pipe != nil && s.Outcome == transport.Ack && len(s.Writes) > 0 {
		return c.book.Finish(e, s, c.settlePipelined(ctx, e.Value, d, s))
	}
	return c.book.Finish(e, s, c.settle(ctx, e.Value, s))
}

func (c *consumer) settle(ctx context.Context, msg pc.Message, s transport.Settlement) error {
	if s.Outcome == transport.Rewind {
		c.pc.Nack(msg)
		return nil
	}
	if err := ledger.SendAll(ctx, s.Writes, c.t.sendSettle); err != nil {
		return err
	}
	if err := c.pc.Ack(msg); err != nil {
		// The broker redelivers what it never saw acknowledged.
		return fmt.Errorf("pulsar: ack on %q: %w", c.queue, err)
	}
	return nil
}

// Close first waits, until ctx ends, for the pipelined settlements in flight (each
// delivery is acknowledged once its writes are confirmed, or rewound), then closes the
// Pulsar consumer; the broker redelivers what it handed out and was not acknowledged
// to the other consumers of the subscription (a delivery whose writes were still in
// flight too: they may stay, a duplicate, never a loss). A delivery settled after
// Close fails with an error matching [transport.ErrClosed].
func (c *consumer) Close(ctx context.Context) error {
	c.once.Do(func() {
		// What the ledger returns needs no give-back of its own: closing the Pulsar
		// consumer returns every unacknowledged message to the subscription.
		_ = c.book.Close()
		if c.pipe != nil && !c.pipe.Wait(ctx) {
			c.t.log.Warn("pulsar: consumer closed before the receipts of its pipelined settle writes came; those deliveries are delivered again", "queue", c.queue)
		}
		c.pc.Close()
		c.t.forget(c)
	})
	return nil
}
