package artemis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/internal/ledger"
	"github.com/babelqueue-go/babelqueue/internal/settlepipe"
	"github.com/babelqueue-go/babelqueue/transport"
)

// Consume attaches a receiver to queue with link credit opts.Prefetch (at least 1).
func (t *Transport) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if queue == "" {
		return nil, errors.New("artemis: consume: empty queue name")
	}
	credit := int32(min(max(opts.Prefetch, 1), math.MaxInt32))
	// A Transactional consumer (a redrive) does not pipeline: without AMQP
	// transactions here, settling before Settle returns keeps a kill's duplicates to
	// the one delivery in hand.
	c := &consumer{t: t, queue: queue, credit: credit, manual: t.opts.pipeline && !opts.Transactional, failed: opts.SettleFailed,
		book: ledger.New[handle](ledger.Config{Broker: "artemis", Queue: queue, Prefetch: int(credit), Logger: t.log})}
	if c.manual {
		c.pipe = make(chan struct{}, max(pipeDepth, int(credit)))
	}
	if _, err := c.link(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

type consumer struct {
	t      *Transport
	queue  string
	credit int32
	// failed is ConsumeOptions.SettleFailed: told of a pipelined settlement whose writes
	// failed after Settle returned.
	failed func(*transport.Delivery, transport.Settlement, error)

	// book holds the deliveries handed out and not settled: their prefetch slots (a
	// receiver attached after a lost link gets fresh credit while deliveries of the
	// old one are still held) and their settle state. Closing it stops the consumer.
	book *ledger.Ledger[handle]

	mu     sync.Mutex // guards sess, recv, closed, granted; held while attaching
	sess   *amqp.Session
	recv   *amqp.Receiver
	closed bool

	// manual is set when settle writes are pipelined: the receiver's link credit is
	// then issued by receive (see pipeline.go), and granted counts the credit issued on
	// recv and not yet used by a delivery received from it (in flight or buffered).
	manual  bool
	granted int

	pipe    chan struct{}       // a slot per pipelined settlement in flight
	pending settlepipe.Inflight // pipelined settlements in flight; Close waits for them

	holdMu   sync.Mutex
	failures int // pipelined settle writes failed in a row; guarded by holdMu
}

// handle is the consumer's bookkeeping for one delivery.
type handle struct {
	recv *amqp.Receiver
	msg  *amqp.Message
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
		credit = -1 // issued by receive
	}
	r, err := sess.NewReceiver(ctx, c.queue, &amqp.ReceiverOptions{
		Credit:             credit,
		SourceCapabilities: []string{capabilityQueue},
	})
	if err != nil {
		_ = closeQuietly(sess)
		c.t.mu.Lock()
		c.t.noteErrLocked(err)
		c.t.mu.Unlock()
		return nil, fmt.Errorf("artemis: attach receiver to %q: %w", c.queue, err)
	}
	c.sess, c.recv, c.granted = sess, r, 0
	return r, nil
}

// topUp issues link credit on r, when the credit is managed here, so that the
// deliveries held (handed out and not finished in the ledger) and the credit granted
// and unused add up to the prefetch: what go-amqp's automatic credit gives, less the
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
	want := int(c.credit) - c.book.Held() - c.granted
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

func closeQuietly(s *amqp.Session) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Close(ctx)
}

// unlink forgets a receiver whose link failed.
func (c *consumer) unlink(r *amqp.Receiver, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recv != r {
		return
	}
	c.t.log.Warn("artemis: receiver link lost; attaching again", "queue", c.queue, "err", err)
	c.recv = nil
	if c.sess != nil {
		go func(s *amqp.Session) { _ = closeQuietly(s) }(c.sess)
		c.sess = nil
	}
	c.t.mu.Lock()
	c.t.noteErrLocked(err)
	c.t.mu.Unlock()
}

// Receive returns the next delivery, once a prefetch slot is free. A lost link or
// connection is attached again, backing off between attempts, until ctx ends or the
// consumer is closed.
func (c *consumer) Receive(ctx context.Context) (*transport.Delivery, error) {
	return c.book.Receive(ctx, c.receive)
}

func (c *consumer) receive(ctx context.Context) (*transport.Delivery, error) {
	backoff := 50 * time.Millisecond
	failures := 0
	for {
		if err := c.stopped(ctx); err != nil {
			return nil, err
		}
		r, err := c.link(ctx)
		if err == nil {
			var msg *amqp.Message
			c.topUp(r)
			msg, err = r.Receive(ctx, nil)
			if err == nil {
				c.used(r)
				e, herr := c.book.Hand(handle{recv: r, msg: msg})
				if herr != nil { // closed meanwhile: detaching gives it back
					return nil, herr
				}
				d := fromAMQP(c.queue, msg)
				d.Handle = e
				return d, nil
			}
			if stop := c.stopped(ctx); stop != nil {
				return nil, stop
			}
			if !linkGone(err) {
				return nil, err
			}
			c.unlink(r, err)
		} else if errors.Is(err, transport.ErrClosed) {
			return nil, err
		} else if stop := c.stopped(ctx); stop != nil {
			return nil, stop
		} else {
			level := slog.LevelWarn
			if failures > 0 {
				level = slog.LevelDebug // said once per outage
			}
			c.t.log.Log(ctx, level, "artemis: cannot attach receiver; retrying", "queue", c.queue, "err", err)
			failures++
		}
		timer := time.NewTimer(backoff)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-c.book.Done():
			timer.Stop()
			return nil, transport.ErrClosed
		}
		backoff = min(backoff*2, c.t.opts.maxBackoff)
	}
}

// stopped returns ctx's error, or ErrClosed once the consumer or transport closed.
func (c *consumer) stopped(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.book.Done():
		return transport.ErrClosed
	default:
	}
	c.t.mu.Lock()
	closed := c.t.closed
	c.t.mu.Unlock()
	if closed {
		return transport.ErrClosed
	}
	return nil
}

// Settle finishes a delivery: see the package documentation.
func (c *consumer) Settle(ctx context.Context, d *transport.Delivery, s transport.Settlement) error {
	e, err := c.book.Begin(d, s)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.t.opts.confirmTimeout)
		defer cancel()
	}
	return c.book.Finish(e, s, c.settle(ctx, e.Value, d, s, e.AckFailed()))
}

// settle settles one delivery. A Rewind counts as a failed delivery (Artemis raises its
// delivery-count), unless an Ack of it failed before (ackFailed): then a settle write
// was refused, not its handling, and counting it would move the message to Artemis's
// dead-letter address after max-delivery-attempts rewinds, which a dead-letter queue
// refusing writes for three seconds was enough for (found by the fault suite, issue 16).
func (c *consumer) settle(ctx context.Context, h handle, d *transport.Delivery, s transport.Settlement, ackFailed bool) error {
	if s.Outcome == transport.Rewind {
		err := h.recv.ModifyMessage(ctx, h.msg, &amqp.ModifyMessageOptions{DeliveryFailed: !ackFailed})
		if err != nil && !linkGone(err) {
			return fmt.Errorf("artemis: rewind: %w", err)
		}
		return nil // a lost link already gave the delivery back to the broker
	}
	if len(s.Writes) > 0 && c.manual {
		return c.settlePipelined(ctx, h, d, s)
	}
	if err := ledger.SendAll(ctx, s.Writes, c.t.write); err != nil {
		return err
	}
	if err := h.recv.AcceptMessage(ctx, h.msg); err != nil {
		if linkGone(err) {
			// The broker took the delivery back with the link and delivers it again.
			return &transport.TakenBackError{Broker: "artemis", Queue: c.queue, Reason: "its link is gone",
				Err: fmt.Errorf("%w: %w", ErrDeliveryLost, err)}
		}
		return fmt.Errorf("artemis: accept: %w", err)
	}
	return nil
}

// Close waits, until ctx ends, for the pipelined settlements in flight (their
// deliveries are accepted once their writes are), then detaches the receiver;
// deliveries handed out and not settled go back to the broker, which redelivers them.
func (c *consumer) Close(ctx context.Context) error {
	c.book.Close() // detaching gives the deliveries back
	c.pending.Wait(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
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
