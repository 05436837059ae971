package pulsar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue/transport"
)

// ErrForeignDelivery is returned by Settle for a delivery another consumer handed out.
var ErrForeignDelivery = errors.New("pulsar: delivery does not belong to this consumer")

type consumer struct {
	t     *Transport
	queue string
	pc    pc.Consumer
	slots chan struct{} // one token per delivery handed out and not settled
	done  chan struct{}
	once  sync.Once
}

// handle is the transport's bookkeeping of one delivery.
type handle struct {
	c       *consumer
	msg     pc.Message
	settled atomic.Bool
}

// Receive waits for the next message of the subscription. No more than the prefetch
// of deliveries are handed out and unsettled at a time.
func (c *consumer) Receive(ctx context.Context) (*transport.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-c.done:
		return nil, transport.ErrClosed
	default:
	}
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.done:
		return nil, transport.ErrClosed
	}
	d, err := c.receive(ctx)
	if err != nil {
		<-c.slots
	}
	return d, err
}

func (c *consumer) receive(ctx context.Context) (*transport.Delivery, error) {
	// The client's Receive does not watch our close: tie it to done.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-rctx.Done():
		}
	}()
	msg, err := c.pc.Receive(rctx)
	if err != nil {
		select {
		case <-c.done:
			return nil, transport.ErrClosed
		default:
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("pulsar: receive from %q: %w", c.queue, err)
	}
	d := &transport.Delivery{Queue: c.queue, Handle: &handle{c: c, msg: msg}}
	deliveryFields(d, msg)
	return d, nil
}

// Settle finishes d. Ack sends every settle write on the topic's producer and waits for
// the broker to confirm each before it acknowledges d; a failed write acknowledges
// nothing and returns a [transport.SettleWriteError]. Rewind negatively acknowledges
// d, so the broker redelivers it after the nack redelivery delay with its redelivery
// count one higher.
func (c *consumer) Settle(ctx context.Context, d *transport.Delivery, s transport.Settlement) error {
	if d == nil {
		return ErrForeignDelivery
	}
	h, ok := d.Handle.(*handle)
	if !ok || h.c != c {
		return ErrForeignDelivery
	}
	if len(s.Writes) > 0 && s.Outcome != transport.Ack {
		return fmt.Errorf("pulsar: settle writes are only allowed with Ack, not %s", s.Outcome)
	}
	if s.Outcome != transport.Ack && s.Outcome != transport.Rewind {
		// HandOff: Pulsar has no redrive of its own that the runtime hands work to.
		return transport.ErrUnsupported
	}
	if !h.settled.CompareAndSwap(false, true) {
		return transport.ErrAlreadySettled
	}
	switch s.Outcome {
	case transport.Ack:
		for _, m := range s.Writes {
			if err := c.t.send(ctx, m); err != nil {
				// Nothing was acknowledged: the delivery stays open for a Rewind.
				h.settled.Store(false)
				q := ""
				if m != nil {
					q = m.Queue
				}
				return &transport.SettleWriteError{Queue: q, Err: err}
			}
		}
		<-c.slots
		if err := c.pc.Ack(h.msg); err != nil {
			// The broker redelivers what it never saw acknowledged.
			return fmt.Errorf("pulsar: ack on %q: %w", c.queue, err)
		}
	case transport.Rewind:
		<-c.slots
		c.pc.Nack(h.msg)
	}
	return nil
}

// Close closes the Pulsar consumer; the broker redelivers what it handed out and was
// not acknowledged to the other consumers of the subscription.
func (c *consumer) Close(context.Context) error {
	first := false
	c.once.Do(func() {
		first = true
		close(c.done)
	})
	if !first {
		return nil
	}
	c.pc.Close()
	c.t.forget(c)
	return nil
}
