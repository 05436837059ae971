package amqp

import (
	"context"
	"errors"
	"fmt"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Settlement on RabbitMQ: Ack is basic.ack after the writes are confirmed, a give-back
// (Rewind) is basic.nack with requeue; HandOff is not offered (RabbitMQ has no redrive
// of its own for it). Every settle write is published mandatory on a confirm channel,
// and confirmed when the broker acked it and did not return it. With pipelined settle
// writes (the default, [WithPipelinedSettles]) the kit acknowledges the delivery once
// the confirms are in, or gives it back when a write is nacked, returned, lost with its
// channel or not confirmed within the confirm timeout; meanwhile the delivery still
// counts against the channel's prefetch (basic.qos). A delivery whose channel died
// cannot be acknowledged: the broker redelivers it, and an Ack of it returns a
// [transport.TakenBackError] wrapping [ErrDeliveryLost] (its Rewind succeeds: the broker
// requeued it already).

// Ack acknowledges the delivery on its channel.
func (c *consumer) Ack(ctx context.Context, m msg) error {
	if c.tx != nil {
		return c.settleTx(ctx, m, transport.Settlement{Outcome: transport.Ack}) // move.go
	}
	if m.s.ch.IsClosed() {
		return c.lost(nil)
	}
	if err := m.s.ch.Ack(m.d.DeliveryTag, false); err != nil {
		return c.lost(err)
	}
	return nil
}

// GiveBack nacks the deliveries with requeue. A delivery whose channel closed needs
// nothing: the broker requeued it then (and a channel that dies meanwhile requeues it
// by itself).
func (c *consumer) GiveBack(ctx context.Context, ms []msg, _ driverkit.Reason) error {
	for _, m := range ms {
		switch {
		case c.tx != nil:
			_ = c.settleTx(ctx, m, transport.Settlement{Outcome: transport.Rewind}) // move.go
		case !m.s.ch.IsClosed():
			_ = m.s.ch.Nack(m.d.DeliveryTag, false, true)
		}
	}
	return nil
}

// Write publishes the settle writes of m on one confirm channel and returns the wait
// for their confirms. Nothing is written for a delivery whose channel is gone.
func (c *consumer) Write(ctx context.Context, m msg, ws []*transport.Message) (driverkit.Confirm, error) {
	if m.s.ch.IsClosed() {
		return nil, c.lost(nil)
	}
	ss, err := c.t.publishWrites(ctx, ws)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return c.t.confirmed(ctx, ws, ss) }, nil
}

// AckWrites settles a transactional consumer's delivery with its writes in one AMQP
// transaction (move.go).
func (c *consumer) AckWrites(ctx context.Context, m msg, ws []*transport.Message) error {
	return c.settleTx(ctx, m, transport.Settlement{Outcome: transport.Ack, Writes: ws})
}

// lost is the error of a delivery whose channel died before it was settled.
func (c *consumer) lost(err error) error {
	if err == nil {
		err = ErrDeliveryLost
	} else {
		err = fmt.Errorf("%w: %w", ErrDeliveryLost, err)
	}
	return &transport.TakenBackError{Broker: "amqp", Queue: c.queue, Reason: "its channel closed", Err: err}
}

// writeConfirmed makes every write on one channel and waits for all their confirms.
// Any failure is a *transport.SettleWriteError.
func (t *Transport) writeConfirmed(ctx context.Context, ms []*transport.Message) error {
	ss, err := t.publishWrites(ctx, ms)
	if err != nil {
		return err
	}
	return t.confirmed(ctx, ms, ss)
}

// publishWrites publishes ms on one confirm channel, which goes back to the idle list
// at once for other writers, and returns them as sent. Any failure is a
// *transport.SettleWriteError; the publishes before it stay made.
func (t *Transport) publishWrites(ctx context.Context, ms []*transport.Message) ([]sent, error) {
	for _, m := range ms {
		if err := transport.CheckSize("amqp", m.Queue, len(m.Body), t.s.maxSize); err != nil {
			return nil, &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
	}
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

// confirmed waits for every confirm of ss, until ctx ends or the confirm timeout
// passes, then checks that none was returned, and returns the first failure as a
// *transport.SettleWriteError.
func (t *Transport) confirmed(ctx context.Context, ws []*transport.Message, ss []sent) error {
	var buf [4]error // the usual settlement has one write: no allocation
	errs := buf[:0]
	if len(ss) > len(buf) {
		errs = make([]error, 0, len(ss))
	}
	errs = errs[:len(ss)]
	t.awaitConfirms(ctx, ws, ss, errs)
	t.checkReturns(ss, errs)
	for i, err := range errs {
		if err != nil {
			return &transport.SettleWriteError{Queue: ws[i].Queue, Err: err}
		}
	}
	return nil
}
