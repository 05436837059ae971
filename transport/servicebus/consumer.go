package servicebus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// maxCredits is the most messages one ReceiveMessages call may ask for.
const maxCredits = 5000

// Consume opens a peek-lock receiver on queue and checks that the queue can be read
// (one PeekMessages call within the connect timeout). The consumer is the kit's
// ([driverkit.Consumer]) on Service Bus's primitives.
func (t *Transport) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if queue == "" {
		return nil, errors.New("servicebus: consume: empty queue name")
	}
	if t.consumers.Closed() {
		return nil, transport.ErrClosed
	}
	r, err := t.ns.newReceiver(queue)
	if err != nil {
		return nil, fmt.Errorf("servicebus: receiver for %q: %w", queue, err)
	}
	if err := t.checkQueue(ctx, r, queue); err != nil {
		_ = r.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	c := &consumer{t: t, queue: queue, r: r,
		log: t.cfg.Logger.With(slog.String("transport", "servicebus"), slog.String("queue", queue))}
	k, err := driverkit.New[*lease](c, driverkit.Config{
		Broker: "servicebus", Queue: queue, Logger: t.cfg.Logger, Group: &t.consumers,
		HandOff: true, MaxBatch: min(max(opts.Prefetch, 1), maxCredits),
	}, opts)
	if err != nil {
		_ = r.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	c.kit = k
	return k, nil
}

// consumer is Service Bus's side of one consumer: the peek-lock receiver the kit drives.
type consumer struct {
	t     *Transport
	queue string
	r     receiver
	kit   *driverkit.Consumer[*lease]
	log   *slog.Logger
}

// lease is one received message and the renewal of its lock.
type lease struct {
	msg       *azservicebus.ReceivedMessage
	stopRenew context.CancelFunc
	renewDone chan struct{}
}

// stopRenewal ends the renewal of the lock and waits for it.
func (l *lease) stopRenewal() {
	l.stopRenew()
	<-l.renewDone
}

// Receive asks for up to len(into) messages (one call at a time: the SDK's receiver takes
// no concurrent calls) and starts renewing their locks.
func (c *consumer) Receive(ctx context.Context, into []*lease) (int, error) {
	rctx, cancel := c.kit.Bind(ctx)
	defer cancel()
	for empty := 0; ; empty++ {
		msgs, err := c.r.ReceiveMessages(rctx, len(into), nil)
		n := 0
		for _, m := range msgs {
			if m != nil && n < len(into) {
				into[n] = c.hold(m)
				n++
			}
		}
		switch {
		case n > 0:
			return n, nil
		case ctx.Err() != nil:
			return 0, ctx.Err()
		case rctx.Err() != nil:
			return 0, transport.ErrClosed
		case err != nil:
			return 0, fmt.Errorf("servicebus: receive from %q: %w", c.queue, err)
		}
		// No message and no error: the SDK recovers a link on the next call. Do not spin.
		if empty > 0 {
			_ = driverkit.Sleep(rctx, 100*time.Millisecond)
		}
	}
}

// IsRetryable is false: the SDK retries a lost link itself; an error is one it gave up on.
func (c *consumer) IsRetryable(error) bool { return false }

// hold starts renewing the lock of a received message.
func (c *consumer) hold(m *azservicebus.ReceivedMessage) *lease {
	l := &lease{msg: m, renewDone: make(chan struct{})}
	if c.t.cfg.renewEvery < 0 {
		l.stopRenew = func() {}
		close(l.renewDone)
		return l
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.stopRenew = cancel
	go c.renew(ctx, l, c.t.cfg.now())
	return l
}

// renew keeps the lock of l alive until the delivery is settled (or for
// max_lock_renewal); a lost lock ends it.
func (c *consumer) renew(ctx context.Context, l *lease, start time.Time) {
	defer close(l.renewDone)
	cfg := c.t.cfg
	failed := false
	for {
		wait := cfg.renewEvery
		if wait == 0 {
			wait = DefaultLockRenewal
			if lu := l.msg.LockedUntil; lu != nil {
				wait = max(lu.Sub(cfg.now())/2, 50*time.Millisecond)
			}
		}
		if failed {
			wait = min(wait, time.Second)
		}
		if cfg.maxRenewal > 0 && cfg.now().Add(wait).After(start.Add(cfg.maxRenewal)) {
			return
		}
		if driverkit.Sleep(ctx, wait) != nil {
			return
		}
		err := c.r.RenewMessageLock(ctx, l.msg, nil)
		if err == nil {
			failed = false
			continue
		}
		if ctx.Err() != nil {
			return
		}
		var sbe *azservicebus.Error
		if errors.As(err, &sbe) && (sbe.Code == azservicebus.CodeLockLost || sbe.Code == azservicebus.CodeClosed) {
			c.log.Warn("servicebus: message lock lost; Service Bus will redeliver the message",
				slog.String("message_id", l.msg.MessageID), slog.Any("error", err))
			return
		}
		c.log.Warn("servicebus: renewing a message lock failed; retrying",
			slog.String("message_id", l.msg.MessageID), slog.Any("error", err))
		failed = true
	}
}

// Decode reads the delivery from the received message ([Reconcile]).
func (c *consumer) Decode(l *lease, d *transport.Delivery) { reconcile(d, l.msg) }

// Write sends the settle writes in order, each confirmed by the broker; the lock stays
// renewed meanwhile.
func (c *consumer) Write(ctx context.Context, _ *lease, ws []*transport.Message) (driverkit.Confirm, error) {
	return nil, driverkit.SendAll(ctx, ws, c.t.send)
}

// Ack completes the message.
func (c *consumer) Ack(ctx context.Context, l *lease) error {
	l.stopRenewal()
	return c.settled("complete", c.r.CompleteMessage(ctx, l.msg, nil))
}

// GiveBack abandons the messages (Service Bus counts the delivery).
func (c *consumer) GiveBack(ctx context.Context, ls []*lease, _ driverkit.Reason) error {
	var errs []error
	for _, l := range ls {
		errs = append(errs, c.HandOff(ctx, l))
	}
	return errors.Join(errs...)
}

// HandOff abandons the message, which leaves it to MaxDeliveryCount.
func (c *consumer) HandOff(ctx context.Context, l *lease) error {
	l.stopRenewal()
	return c.settled("abandon", c.r.AbandonMessage(ctx, l.msg, nil))
}

// settled reports the outcome of a settlement call: a lost lock as a
// [*transport.TakenBackError].
func (c *consumer) settled(verb string, err error) error {
	var sbe *azservicebus.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &sbe) && sbe.Code == azservicebus.CodeLockLost:
		return &transport.TakenBackError{Broker: "servicebus", Queue: c.queue, Reason: "the message lock expired", Err: err}
	}
	return fmt.Errorf("servicebus: %s message on %q (Service Bus redelivers it once its lock expires): %w", verb, c.queue, err)
}

// Close closes the receiver.
func (c *consumer) Close(ctx context.Context) error {
	if err := c.r.Close(ctx); err != nil {
		return fmt.Errorf("servicebus: close receiver for %q: %w", c.queue, err)
	}
	return nil
}
