package artemis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Consume attaches a receiver to queue with link credit opts.Prefetch (at least 1). The
// receive loop, the settlements and Close are the kit's ([driverkit.Consumer]); this
// file is Artemis's side of them: a receiver link attached again when it is lost, its
// credit, and the dispositions.
func (t *Transport) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if queue == "" {
		return nil, errors.New("artemis: consume: empty queue name")
	}
	credit := int32(min(max(opts.Prefetch, 1), math.MaxInt32))
	// A Transactional consumer (a redrive) does not pipeline: without AMQP
	// transactions here, settling before Settle returns keeps a kill's duplicates to
	// the one delivery in hand.
	pipelined := t.opts.pipeline && !opts.Transactional
	c := &consumer{t: t, queue: queue, credit: credit, manual: pipelined}
	c.link = driverkit.NewAttachment(c.attach)
	if _, err := c.link.Get(ctx); err != nil {
		return nil, err
	}
	k, err := driverkit.New[msg](c, driverkit.Config{
		Broker:            "artemis",
		Queue:             queue,
		Logger:            t.log,
		Group:             &t.consumers,
		Pipeline:          pipelined,
		ConfirmTimeout:    t.opts.confirmTimeout,
		ConcurrentReceive: true,
		MaxBackoff:        t.opts.maxBackoff,
	}, opts)
	if err != nil {
		_ = c.Close(ctx)
		return nil, err
	}
	c.kit, c.link.Done = k, k.Done()
	return k, nil
}

// consumer is Artemis's side of one consumer: the receiver link on the queue.
type consumer struct {
	t      *Transport
	queue  string
	credit int32 // the prefetch
	kit    *driverkit.Consumer[msg]
	link   *driverkit.Attachment[link] // attached again by a Receive once lost

	// manual is set when settle writes are pipelined: the receiver's link credit is
	// then issued by Receive (topUp), as a pipelined delivery is finished in the kit (its
	// prefetch slot is free) while Artemis still holds it unsettled, and go-amqp's
	// automatic credit would count it as held.
	manual bool
	mu     sync.Mutex // guards the live link's granted
}

// link is a receiver link on the queue, on a session of its own.
type link struct {
	r       *amqp.Receiver
	s       *amqp.Session
	granted int // manual: the credit issued on r and not yet used by a delivery (in flight or buffered)
}

// msg is one delivery as the kit holds it: the message and the link it came on, which
// its disposition must go to.
type msg struct {
	r *amqp.Receiver
	m *amqp.Message
}

// attach attaches a receiver to the queue.
func (c *consumer) attach(ctx context.Context) (*link, error) {
	sess, err := c.t.session(ctx)
	if err != nil {
		return nil, err
	}
	credit := c.credit
	if c.manual {
		credit = -1 // issued by topUp
	}
	r, err := sess.NewReceiver(ctx, c.queue, &amqp.ReceiverOptions{
		Credit:             credit,
		SourceCapabilities: []string{capabilityQueue},
	})
	if err != nil {
		_ = closeQuietly(sess)
		c.t.noteErr(nil, err)
		return nil, fmt.Errorf("artemis: attach receiver to %q: %w", c.queue, err)
	}
	return &link{r: r, s: sess}, nil
}

// topUp issues link credit on l, when the credit is managed here, so that the
// deliveries held (handed out and not finished in the kit) and the credit granted and
// unused add up to the prefetch: what go-amqp's automatic credit gives, less the
// deliveries whose pipelined writes are in flight. The caller holds a prefetch slot, so
// at least one credit is granted.
func (c *consumer) topUp(l *link) {
	if !c.manual {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.link.Current() != l {
		return
	}
	want := int(c.credit) - c.kit.Held() - l.granted
	if l.granted == 0 {
		want = max(want, 1)
	}
	if want <= 0 {
		return
	}
	if err := l.r.IssueCredit(uint32(want)); err == nil {
		l.granted += want
	} // else the link is closing: its Receive fails and the link is attached again
}

// used records a delivery received on l, which used a credit topUp granted.
func (c *consumer) used(l *link) {
	if !c.manual {
		return
	}
	c.mu.Lock()
	if c.link.Current() == l && l.granted > 0 {
		l.granted--
	}
	c.mu.Unlock()
}

// unlink forgets a link that failed; the next Receive attaches another.
func (c *consumer) unlink(l *link, err error) {
	if c.link.Lost(l) {
		go func() { _ = closeQuietly(l.s) }()
		c.t.noteErr(nil, err)
	}
}

// Receive waits for the next delivery on the live receiver, attaching one first when
// the last was lost.
func (c *consumer) Receive(ctx context.Context, into []msg) (int, error) {
	l, err := c.link.Get(ctx)
	if err != nil {
		return 0, err
	}
	c.topUp(l)
	m := l.r.Prefetched() // the common case under load: no wait, no context
	if m == nil {
		rctx, cancel := c.kit.Bind(ctx)
		m, err = l.r.Receive(rctx, nil)
		cancel()
		if err != nil {
			if linkGone(err) {
				c.unlink(l, err)
			}
			return 0, err
		}
	}
	c.used(l)
	into[0] = msg{r: l.r, m: m}
	return 1, nil
}

// IsRetryable reports whether the consumer can receive again after err: every failure
// to attach or to receive is (the link or connection is attached again, backing off),
// but not once the transport is closed, nor when a connection given to [New] is lost
// without [WithDial].
func (c *consumer) IsRetryable(err error) bool { return !errors.Is(err, transport.ErrClosed) }

// Decode reads the message into the delivery (message.go).
func (c *consumer) Decode(m msg, d *transport.Delivery) { decode(m.m, d) }

// Ack accepts the delivery (after its settle writes were accepted: Write). A delivery
// whose link is gone was taken back by the broker with the link.
func (c *consumer) Ack(ctx context.Context, m msg) error {
	ctx, cancel := c.t.bound(ctx)
	defer cancel()
	if err := m.r.AcceptMessage(ctx, m.m); err != nil {
		if linkGone(err) {
			// The broker took the delivery back with the link and delivers it again.
			return &transport.TakenBackError{Broker: "artemis", Queue: c.queue, Reason: "its link is gone",
				Err: fmt.Errorf("%w: %w", ErrDeliveryLost, err)}
		}
		return fmt.Errorf("artemis: accept: %w", err)
	}
	return nil
}

// GiveBack answers each delivery with the modified outcome, delivery-failed set for a
// Rewind (a higher delivery-count) and unset for a delivery whose Ack failed, so that a
// refused settle write does not count against Artemis's max-delivery-attempts (issue
// 16). Closing needs nothing: detaching the link gives the deliveries back.
func (c *consumer) GiveBack(ctx context.Context, ms []msg, why driverkit.Reason) error {
	if why == driverkit.Closing {
		return nil
	}
	ctx, cancel := c.t.bound(ctx)
	defer cancel()
	var errs []error
	for _, m := range ms {
		err := m.r.ModifyMessage(ctx, m.m, &amqp.ModifyMessageOptions{DeliveryFailed: why == driverkit.Rewound})
		if err != nil && !linkGone(err) { // a lost link gave the delivery back already
			errs = append(errs, fmt.Errorf("artemis: give back (%s): %w", why, err))
		}
	}
	return errors.Join(errs...)
}

// Write sends the settle writes of a delivery. Pipelined, they are all sent unsettled
// at once and the returned Confirm waits for Artemis's outcomes; otherwise each is sent
// and accepted in turn, stopping at the first that fails.
func (c *consumer) Write(ctx context.Context, _ msg, ws []*transport.Message) (driverkit.Confirm, error) {
	if !c.manual {
		return nil, driverkit.SendAll(ctx, ws, func(ctx context.Context, w *transport.Message) error {
			return c.t.write(ctx, w, c.t.duplicateID())
		})
	}
	sent, err := c.t.sendWrites(ctx, ws)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return awaitWrites(ctx, ws, sent) }, nil
}

// Close detaches the receiver: the deliveries it holds and that were not settled go
// back to the broker, which redelivers them.
func (c *consumer) Close(ctx context.Context) error {
	l, err := c.link.Close(ctx)
	if l == nil {
		return err
	}
	if cerr := l.r.Close(ctx); cerr != nil && !linkGone(cerr) {
		err = cerr
	}
	if cerr := l.s.Close(ctx); cerr != nil && !linkGone(cerr) && err == nil {
		err = cerr
	}
	return err
}
