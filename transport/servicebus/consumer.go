package servicebus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue/internal/ledger"
	"github.com/babelqueue-go/babelqueue/transport"
)

// maxCredits is the most messages one ReceiveMessages call may ask for (the SDK's link
// buffer).
const maxCredits = 5000

// Consume opens a peek-lock receiver on queue and checks, with one PeekMessages call
// bounded by the connect timeout, that the queue can be read: a namespace that does not
// answer, a missing queue or a credential without the Listen right fails here. At most
// opts.Prefetch messages are held at a time (handed out and not settled, plus received
// and not yet handed out).
func (t *Transport) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if queue == "" {
		return nil, errors.New("servicebus: consume: empty queue name")
	}
	if t.isClosed() {
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
	prefetch := min(max(opts.Prefetch, 1), maxCredits)
	cctx, cancel := context.WithCancel(context.Background())
	log := t.cfg.logger.With(slog.String("transport", "servicebus"), slog.String("queue", queue))
	c := &consumer{
		t:       t,
		queue:   queue,
		r:       r,
		recvTok: make(chan struct{}, 1),
		ctx:     cctx,
		cancel:  cancel,
		log:     log,
		book: ledger.New[*lease](ledger.Config{
			Broker:   "servicebus",
			Queue:    queue,
			Prefetch: prefetch,
			Outcomes: []transport.Outcome{transport.Ack, transport.Rewind, transport.HandOff},
			Logger:   t.cfg.logger,
		}),
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		cancel()
		_ = r.Close(context.WithoutCancel(ctx))
		return nil, transport.ErrClosed
	}
	t.consumers[c] = struct{}{}
	return c, nil
}

type consumer struct {
	t       *Transport
	queue   string
	r       receiver
	book    *ledger.Ledger[*lease] // handed out and not settled
	recvTok chan struct{}          // held by the one goroutine calling ReceiveMessages
	ctx     context.Context
	cancel  context.CancelFunc
	log     *slog.Logger

	mu     sync.Mutex
	buffer []*lease // received, not yet handed out
	closed bool
}

// lease is the transport's hold on one received message: the message and the renewal
// of its lock.
type lease struct {
	msg       *azservicebus.ReceivedMessage
	stopRenew context.CancelFunc
	renewDone chan struct{}
}

func (l *lease) stopRenewal() {
	l.stopRenew()
	<-l.renewDone
}

// Receive hands out the next message, receiving a batch of up to the free prefetch when
// none is held. While settlements keep failing it backs off first.
func (c *consumer) Receive(ctx context.Context) (*transport.Delivery, error) {
	if err := c.book.Acquire(ctx); err != nil {
		return nil, err
	}
	d, err := c.next(ctx)
	if err != nil {
		c.book.Unacquire()
	}
	return d, err
}

func (c *consumer) next(ctx context.Context) (*transport.Delivery, error) {
	select {
	case c.recvTok <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.ctx.Done():
		return nil, transport.ErrClosed
	}
	defer func() { <-c.recvTok }()
	empty := 0
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, transport.ErrClosed
		}
		if len(c.buffer) > 0 {
			l := c.buffer[0]
			c.buffer[0] = nil
			c.buffer = c.buffer[1:]
			c.mu.Unlock()
			e, err := c.book.Hand(l)
			if err != nil {
				c.abandon(context.Background(), l, "handing out on close")
				return nil, err
			}
			d := Reconcile(c.queue, l.msg)
			d.Handle = e
			return d, nil
		}
		c.mu.Unlock()
		// Room for this caller's slot and those of the callers waiting behind it.
		want := min(max(c.book.Prefetch()-c.book.Held(), 1), maxCredits)

		rctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(c.ctx, cancel)
		msgs, err := c.r.ReceiveMessages(rctx, want, nil)
		stop()
		cancel()
		n := c.hold(msgs)
		if n > 0 {
			empty = 0
			continue
		}
		switch {
		case c.ctx.Err() != nil:
			return nil, transport.ErrClosed
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return nil, fmt.Errorf("servicebus: receive from %q: %w", c.queue, err)
		}
		// No message and no error: the SDK met a recoverable link error and recovers on
		// the next call. Do not spin.
		empty++
		if empty > 1 {
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
			case <-c.ctx.Done():
			}
			t.Stop()
		}
	}
}

// hold buffers received messages and starts renewing their locks. Once the consumer
// closed it abandons them instead.
func (c *consumer) hold(msgs []*azservicebus.ReceivedMessage) int {
	var ls []*lease
	for _, m := range msgs {
		if m != nil {
			l := &lease{msg: m}
			c.startRenewal(l)
			ls = append(ls, l)
		}
	}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.buffer = append(c.buffer, ls...)
	}
	c.mu.Unlock()
	if closed {
		for _, l := range ls {
			c.abandon(context.Background(), l, "receiving on close")
		}
		return 0
	}
	return len(ls)
}

func (c *consumer) startRenewal(l *lease) {
	cfg := c.t.cfg
	l.renewDone = make(chan struct{})
	if cfg.renewEvery < 0 {
		l.stopRenew = func() {}
		close(l.renewDone)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.stopRenew = cancel
	go c.renew(ctx, l, cfg.now())
}

// renew keeps the message lock of l alive until the delivery is settled (or for
// max_lock_renewal). A lost lock ends it: Service Bus will redeliver the message.
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
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
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

// Settle finishes a delivery: Ack sends every write (each confirmed by the broker) and
// then completes the message; Rewind and HandOff abandon it, so Service Bus raises its
// DeliveryCount and dead-letters it natively at the queue's MaxDeliveryCount.
func (c *consumer) Settle(ctx context.Context, d *transport.Delivery, s transport.Settlement) error {
	e, err := c.book.Begin(d, s)
	if err != nil {
		return err
	}
	return c.book.Finish(e, s, c.settle(ctx, e.Value, s))
}

func (c *consumer) settle(ctx context.Context, l *lease, s transport.Settlement) error {
	if s.Outcome == transport.Ack {
		// A failed write leaves the lock renewed, for the Rewind that follows.
		if err := ledger.SendAll(ctx, s.Writes, c.t.send); err != nil {
			return err
		}
	}
	l.stopRenewal()
	verb, err := "complete", error(nil)
	if s.Outcome == transport.Ack {
		err = c.r.CompleteMessage(ctx, l.msg, nil)
	} else {
		verb, err = "abandon", c.r.AbandonMessage(ctx, l.msg, nil)
	}
	var sbe *azservicebus.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &sbe) && sbe.Code == azservicebus.CodeLockLost:
		// The lock expired: Service Bus took the message back and redelivers it.
		return &transport.TakenBackError{Broker: "servicebus", Queue: c.queue, Reason: "the message lock expired", Err: err}
	}
	return fmt.Errorf("servicebus: %s message on %q (Service Bus redelivers it once its lock expires): %w", verb, c.queue, err)
}

// abandon gives a held message back at once, logging a failure (the lock then expires).
func (c *consumer) abandon(ctx context.Context, l *lease, when string) {
	l.stopRenewal()
	if err := c.r.AbandonMessage(ctx, l.msg, nil); err != nil {
		c.log.Warn("servicebus: abandoning an unsettled message failed ("+when+"); Service Bus redelivers it once its lock expires",
			slog.String("message_id", l.msg.MessageID), slog.Any("error", err))
	}
}

// Close stops receiving and abandons every message the consumer holds (handed out and
// not settled, or received and not handed out), so Service Bus redelivers them at once
// rather than when their locks expire.
func (c *consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()

	// Wait for a ReceiveMessages in flight to return (it was cancelled above).
	select {
	case c.recvTok <- struct{}{}:
		defer func() { <-c.recvTok }()
	case <-ctx.Done():
	}

	c.mu.Lock()
	give := c.buffer
	c.buffer = nil
	c.mu.Unlock()
	give = append(give, c.book.Close()...)
	for _, l := range give {
		c.abandon(ctx, l, "on close")
	}
	err := c.r.Close(ctx)

	c.t.mu.Lock()
	delete(c.t.consumers, c)
	c.t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("servicebus: close receiver for %q: %w", c.queue, err)
	}
	return nil
}
