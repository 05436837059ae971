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
	if _, err := c.link(ctx); err != nil {
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
	c.kit = k
	return k, nil
}

// consumer is Artemis's side of one consumer: the receiver link on the queue.
type consumer struct {
	t      *Transport
	queue  string
	credit int32 // the prefetch
	kit    *driverkit.Consumer[msg]

	mu     sync.Mutex // guards sess, recv, closed, granted; held while attaching
	sess   *amqp.Session
	recv   *amqp.Receiver
	closed bool

	// manual is set when settle writes are pipelined: the receiver's link credit is
	// then issued by Receive (topUp), and granted counts the credit issued on recv and
	// not yet used by a delivery received from it (in flight or buffered). A pipelined
	// delivery is finished in the kit (its prefetch slot is free) while Artemis still
	// holds it unsettled, and go-amqp's automatic credit would count it as held.
	manual  bool
	granted int
}

// msg is one delivery as the kit holds it: the message and the link it came on, which
// its disposition must go to.
type msg struct {
	r *amqp.Receiver
	m *amqp.Message
}

// link returns the live receiver, attaching one when there is none.
func (c *consumer) link(ctx context.Context) (*amqp.Receiver, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, transport.ErrClosed
	}
	if c.recv != nil {
		return c.recv, nil
	}
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
		c.t.noteErr(err)
		return nil, fmt.Errorf("artemis: attach receiver to %q: %w", c.queue, err)
	}
	c.sess, c.recv, c.granted = sess, r, 0
	return r, nil
}

// topUp issues link credit on r, when the credit is managed here, so that the
// deliveries held (handed out and not finished in the kit) and the credit granted and
// unused add up to the prefetch: what go-amqp's automatic credit gives, less the
// deliveries whose pipelined writes are in flight. The caller holds a prefetch slot, so
// at least one credit is granted.
func (c *consumer) topUp(r *amqp.Receiver) {
	if !c.manual {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recv != r {
		return
	}
	want := int(c.credit) - c.kit.Held() - c.granted
	if c.granted == 0 {
		want = max(want, 1)
	}
	if want <= 0 {
		return
	}
	if err := r.IssueCredit(uint32(want)); err == nil {
		c.granted += want
	} // else the link is closing: its Receive fails and the link is attached again
}

// used records a delivery received on r, which used a credit topUp granted.
func (c *consumer) used(r *amqp.Receiver) {
	if !c.manual {
		return
	}
	c.mu.Lock()
	if c.recv == r && c.granted > 0 {
		c.granted--
	}
	c.mu.Unlock()
}

// unlink forgets a receiver whose link failed; the next Receive attaches another.
func (c *consumer) unlink(r *amqp.Receiver, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recv != r {
		return
	}
	c.recv = nil
	if c.sess != nil {
		go func(s *amqp.Session) { _ = closeQuietly(s) }(c.sess)
		c.sess = nil
	}
	c.t.noteErr(err)
}

// Receive waits for the next delivery on the live receiver, attaching one first when
// the last was lost.
func (c *consumer) Receive(ctx context.Context, into []msg) (int, error) {
	r, err := c.link(ctx)
	if err != nil {
		return 0, err
	}
	c.topUp(r)
	m := r.Prefetched() // the common case under load: no wait, no context
	if m == nil {
		rctx, cancel := c.kit.Bind(ctx)
		m, err = r.Receive(rctx, nil)
		cancel()
		if err != nil {
			if linkGone(err) {
				c.unlink(r, err)
			}
			return 0, err
		}
	}
	c.used(r)
	into[0] = msg{r: r, m: m}
	return 1, nil
}

// IsRetryable reports whether the consumer can receive again after err: every failure
// to attach or to receive is (the link or connection is attached again, backing off),
// but not once the transport is closed, nor when a connection given to [New] is lost
// without [WithDial].
func (c *consumer) IsRetryable(err error) bool { return !errors.Is(err, transport.ErrClosed) }

// Decode reads the message into the delivery (message.go).
func (c *consumer) Decode(m msg, d *transport.Delivery) { decode(m.m, d) }

// Settlement on Artemis. Ack is the accepted outcome, after the settle writes are
// accepted (Write); a give-back is the modified outcome, with delivery-failed set for a
// Rewind, so Artemis redelivers the message with a higher delivery-count, and unset for
// a delivery whose Ack failed (a settle write refused): that does not count against
// Artemis's max-delivery-attempts, which an outage of the dead-letter queue of a few
// seconds was enough to use up (found by the fault suite, issue 16). A delivery whose
// link is gone was taken back by the broker with the link.

// Ack accepts the delivery.
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

// GiveBack answers each delivery with the modified outcome. Deliveries given back
// because the consumer closes need nothing: detaching the link gives them back.
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
		return nil, driverkit.SendAll(ctx, ws, c.t.write)
	}
	sent, err := c.t.sendWrites(ctx, ws)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return awaitWrites(ctx, sent) }, nil
}

// Close detaches the receiver: the deliveries it holds and that were not settled go
// back to the broker, which redelivers them.
func (c *consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	r, s := c.recv, c.sess
	c.recv, c.sess = nil, nil
	var err error
	if r != nil {
		if cerr := r.Close(ctx); cerr != nil && !linkGone(cerr) {
			err = cerr
		}
	}
	if s != nil {
		if cerr := s.Close(ctx); cerr != nil && !linkGone(cerr) && err == nil {
			err = cerr
		}
	}
	return err
}
