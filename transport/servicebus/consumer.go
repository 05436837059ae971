package servicebus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue/transport"
)

// maxCredits is the most messages one ReceiveMessages call may ask for (the SDK's link
// buffer).
const maxCredits = 5000

// Consume opens a peek-lock receiver on queue. At most opts.Prefetch messages are held
// at a time (handed out and not settled, plus received and not yet handed out).
func (t *Transport) Consume(_ context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if queue == "" {
		return nil, errors.New("servicebus: consume: empty queue name")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, transport.ErrClosed
	}
	r, err := t.ns.newReceiver(queue)
	if err != nil {
		return nil, fmt.Errorf("servicebus: receiver for %q: %w", queue, err)
	}
	prefetch := min(max(opts.Prefetch, 1), maxCredits)
	ctx, cancel := context.WithCancel(context.Background())
	c := &consumer{
		t:        t,
		queue:    queue,
		r:        r,
		prefetch: prefetch,
		slots:    make(chan struct{}, prefetch),
		recvTok:  make(chan struct{}, 1),
		ctx:      ctx,
		cancel:   cancel,
		out:      map[*lease]struct{}{},
		log:      t.cfg.logger.With(slog.String("transport", "servicebus"), slog.String("queue", queue)),
	}
	t.consumers[c] = struct{}{}
	return c, nil
}

type consumer struct {
	t        *Transport
	queue    string
	r        receiver
	prefetch int
	slots    chan struct{} // one per delivery handed out and not settled
	recvTok  chan struct{} // held by the one goroutine calling ReceiveMessages
	ctx      context.Context
	cancel   context.CancelFunc
	log      *slog.Logger

	mu     sync.Mutex
	buffer []*lease            // received, not yet handed out
	out    map[*lease]struct{} // handed out, not settled
	closed bool
}

type leaseState int

const (
	leaseBuffered leaseState = iota
	leasePending
	leaseSettling
	leaseDone
	leaseReleased // given back by Close
)

// lease is the transport's hold on one received message ([transport.Delivery.Handle]).
type lease struct {
	c         *consumer
	msg       *azservicebus.ReceivedMessage
	state     leaseState // guarded by c.mu
	stopRenew context.CancelFunc
	renewDone chan struct{}
}

func (l *lease) stopRenewal() {
	l.stopRenew()
	<-l.renewDone
}

// Receive hands out the next message, receiving a batch of up to the free prefetch when
// none is held.
func (c *consumer) Receive(ctx context.Context) (*transport.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.ctx.Done():
		return nil, transport.ErrClosed
	}
	d, err := c.next(ctx)
	if err != nil {
		<-c.slots
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
			l.state = leasePending
			c.out[l] = struct{}{}
			c.mu.Unlock()
			d := Reconcile(c.queue, l.msg)
			d.Handle = l
			return d, nil
		}
		want := min(max(c.prefetch-len(c.out), 1), maxCredits)
		c.mu.Unlock()

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

// hold buffers received messages and starts renewing their locks.
func (c *consumer) hold(msgs []*azservicebus.ReceivedMessage) int {
	n := 0
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		if m == nil {
			continue
		}
		l := &lease{c: c, msg: m, state: leaseBuffered}
		c.startRenewal(l)
		c.buffer = append(c.buffer, l)
		n++
	}
	return n
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
	if d == nil {
		return errors.New("servicebus: settle: nil delivery")
	}
	l, ok := d.Handle.(*lease)
	if !ok || l.c != c {
		return errors.New("servicebus: delivery does not belong to this consumer")
	}
	switch s.Outcome {
	case transport.Ack, transport.Rewind, transport.HandOff:
	default:
		return transport.ErrUnsupported
	}
	if len(s.Writes) > 0 && s.Outcome != transport.Ack {
		return errors.New("servicebus: settle writes are only allowed with Ack")
	}
	c.mu.Lock()
	switch l.state {
	case leaseDone, leaseSettling:
		c.mu.Unlock()
		return transport.ErrAlreadySettled
	case leaseReleased:
		c.mu.Unlock()
		return fmt.Errorf("servicebus: delivery was given back when the consumer closed: %w", transport.ErrClosed)
	}
	l.state = leaseSettling
	c.mu.Unlock()

	if s.Outcome == transport.Ack {
		for _, w := range s.Writes {
			if err := c.t.send(ctx, w); err != nil {
				c.mu.Lock()
				l.state = leasePending
				c.mu.Unlock()
				return &transport.SettleWriteError{Queue: w.Queue, Err: err}
			}
		}
	}
	l.stopRenewal()
	var err error
	if s.Outcome == transport.Ack {
		err = c.r.CompleteMessage(ctx, l.msg, nil)
	} else {
		err = c.r.AbandonMessage(ctx, l.msg, nil)
	}
	c.finish(l, leaseDone)
	if err != nil {
		verb := "complete"
		if s.Outcome != transport.Ack {
			verb = "abandon"
		}
		return fmt.Errorf("servicebus: %s message on %q (Service Bus redelivers it once its lock expires): %w", verb, c.queue, err)
	}
	return nil
}

func (c *consumer) finish(l *lease, st leaseState) {
	c.mu.Lock()
	l.state = st
	delete(c.out, l)
	c.mu.Unlock()
	select {
	case <-c.slots:
	default:
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
	var give []*lease
	give = append(give, c.buffer...)
	c.buffer = nil
	for l := range c.out {
		if l.state == leasePending {
			give = append(give, l)
		}
	}
	for _, l := range give {
		l.state = leaseReleased
		delete(c.out, l)
	}
	c.mu.Unlock()

	for _, l := range give {
		l.stopRenewal()
		if err := c.r.AbandonMessage(ctx, l.msg, nil); err != nil {
			c.log.Warn("servicebus: abandoning an unsettled message on close failed; Service Bus redelivers it once its lock expires",
				slog.String("message_id", l.msg.MessageID), slog.Any("error", err))
		}
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
