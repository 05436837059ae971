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

	"github.com/babelqueue-go/babelqueue/transport"
)

// Consume attaches a receiver to queue with link credit opts.Prefetch (at least 1).
func (t *Transport) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if queue == "" {
		return nil, errors.New("artemis: consume: empty queue name")
	}
	credit := int32(min(max(opts.Prefetch, 1), math.MaxInt32))
	c := &consumer{t: t, queue: queue, credit: credit, done: make(chan struct{})}
	if _, err := c.link(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

type consumer struct {
	t      *Transport
	queue  string
	credit int32

	mu       sync.Mutex // guards sess, recv, closed; held while attaching
	sess     *amqp.Session
	recv     *amqp.Receiver
	closed   bool
	done     chan struct{}
	doneOnce sync.Once
}

// handle is the consumer's bookkeeping for one delivery.
type handle struct {
	c    *consumer
	recv *amqp.Receiver
	msg  *amqp.Message

	mu       sync.Mutex
	settled  bool
	settling bool
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
	r, err := sess.NewReceiver(ctx, c.queue, &amqp.ReceiverOptions{
		Credit:             c.credit,
		SourceCapabilities: []string{capabilityQueue},
	})
	if err != nil {
		_ = closeQuietly(sess)
		c.t.mu.Lock()
		c.t.noteErrLocked(err)
		c.t.mu.Unlock()
		return nil, fmt.Errorf("artemis: attach receiver to %q: %w", c.queue, err)
	}
	c.sess, c.recv = sess, r
	return r, nil
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

// Receive returns the next delivery. A lost link or connection is attached again,
// backing off between attempts, until ctx ends or the consumer is closed.
func (c *consumer) Receive(ctx context.Context) (*transport.Delivery, error) {
	backoff := 50 * time.Millisecond
	failures := 0
	for {
		if err := c.stopped(ctx); err != nil {
			return nil, err
		}
		r, err := c.link(ctx)
		if err == nil {
			var msg *amqp.Message
			msg, err = r.Receive(ctx, nil)
			if err == nil {
				d := fromAMQP(c.queue, msg)
				d.Handle = &handle{c: c, recv: r, msg: msg}
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
		case <-c.done:
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
	case <-c.done:
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
	h, ok := d.Handle.(*handle)
	if !ok || h.c != c {
		return errors.New("artemis: delivery does not belong to this consumer")
	}
	if len(s.Writes) > 0 && s.Outcome != transport.Ack {
		return fmt.Errorf("artemis: writes are only allowed with Ack, not %s", s.Outcome)
	}
	if s.Outcome != transport.Ack && s.Outcome != transport.Rewind {
		return fmt.Errorf("artemis: %s: %w", s.Outcome, transport.ErrUnsupported)
	}
	h.mu.Lock()
	if h.settled || h.settling {
		h.mu.Unlock()
		return transport.ErrAlreadySettled
	}
	h.settling = true
	h.mu.Unlock()
	done := false
	defer func() {
		h.mu.Lock()
		h.settling, h.settled = false, done
		h.mu.Unlock()
	}()

	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.t.opts.confirmTimeout)
		defer cancel()
	}
	switch s.Outcome {
	case transport.Ack:
		for _, w := range s.Writes {
			if err := c.t.write(ctx, w); err != nil {
				return &transport.SettleWriteError{Queue: w.Queue, Err: err}
			}
		}
		if err := h.recv.AcceptMessage(ctx, h.msg); err != nil {
			if linkGone(err) {
				// The broker took the delivery back with the link and will
				// deliver it again; a Rewind of it now succeeds.
				return fmt.Errorf("%w: %w", ErrDeliveryLost, err)
			}
			return fmt.Errorf("artemis: accept: %w", err)
		}
	case transport.Rewind:
		err := h.recv.ModifyMessage(ctx, h.msg, &amqp.ModifyMessageOptions{DeliveryFailed: true})
		if err != nil && !linkGone(err) {
			return fmt.Errorf("artemis: rewind: %w", err)
		}
		// A lost link already gave the delivery back to the broker.
	}
	done = true
	return nil
}

// Close detaches the receiver; deliveries handed out and not settled go back to the
// broker, which redelivers them.
func (c *consumer) Close(ctx context.Context) error {
	c.doneOnce.Do(func() { close(c.done) })
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
