package amqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Consume declares queue (a durable classic queue, unless [WithoutDeclare]) and starts
// a basic.consume on it with manual acknowledgements and a prefetch of opts.Prefetch.
// The consumer survives connection and channel loss: the next Receive consumes on a new
// channel. The receive loop, the settlements and Close are the kit's
// ([driverkit.Consumer]); this file is RabbitMQ's side of them: Ack is basic.ack once
// the settle writes are confirmed ([WithPipelinedSettles]), a Rewind basic.nack with
// requeue, and HandOff is not offered (RabbitMQ has no redrive of its own). A delivery
// whose channel died cannot be acknowledged: its Ack returns a
// [transport.TakenBackError] wrapping [ErrDeliveryLost], its Rewind succeeds (the
// broker requeued it already). A transactional consumer settles in AMQP transactions
// (move.go).
func (t *Transport) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if queue == "" {
		return nil, errors.New("amqp: Consume: empty queue name")
	}
	prefetch := max(opts.Prefetch, 1)
	c := &consumer{t: t, queue: queue, prefetch: prefetch, tag: "babelqueue-go-" + randomHex(8),
		tx: opts.Transactional, opening: make(chan struct{}, 1)}
	s, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	c.sess.Store(s)
	c.kit, err = driverkit.New[msg](c, driverkit.Config{Broker: "amqp", Queue: queue, Logger: t.log, Group: &t.consumers,
		AtomicAcks: c.tx, Pipeline: t.s.pipeline, ConfirmTimeout: t.s.confirmTimeout, ConcurrentReceive: true,
		PipelineDepth: prefetch, // the channel's basic.qos bounds them anyway
	}, opts)
	if err != nil {
		_ = s.ch.Close()
		return nil, err
	}
	return c.kit, nil
}

// consumer is RabbitMQ's side of one consumer: the channel consuming the queue, opened
// again when it is lost.
type consumer struct {
	t        *Transport
	queue    string
	prefetch int
	tag      string
	kit      *driverkit.Consumer[msg]
	sess     atomic.Pointer[session] // the live channel; nil once lost, until a Receive opens another
	opening  chan struct{}           // a token held while a channel is opened
	closed   bool                    // Close ran; guarded by the opening token
	tx       bool                    // opened with ConsumeOptions.Transactional (move.go)
	txMu     sync.Mutex              // one transaction at a time on the channel
}

// session is one channel consuming the queue.
type session struct {
	ch         *amqp091.Channel
	deliveries <-chan amqp091.Delivery
	closed     chan *amqp091.Error
	rt         *returnTracker // a transactional consumer's returned writes (move.go); else nil
}

// msg is one delivery as the kit holds it: the broker's delivery and the channel it
// came on, which its acknowledgement must go to. It is two words: the kit copies it.
type msg struct {
	s *session
	d *amqp091.Delivery
}

// errChannelLost is the receive error of a consumer whose channel closed (the
// connection was lost, or the broker cancelled the consumer because the queue was
// deleted); the next Receive consumes on a new channel.
var errChannelLost = errors.New("amqp: consumer channel lost; consuming again on a new one")

func (c *consumer) open(ctx context.Context) (*session, error) {
	conn, gen, err := c.t.connection(ctx)
	if err != nil {
		return nil, err
	}
	if !c.t.s.noDeclare {
		if err := c.t.declare(conn, gen, c.queue, nil); err != nil {
			return nil, err
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp: open channel: %w", err)
	}
	fail := func(what string, err error) (*session, error) {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp: %s: %w", what, err)
	}
	s := &session{ch: ch, closed: ch.NotifyClose(make(chan *amqp091.Error, 1))}
	if err := ch.Qos(c.prefetch, 0, false); err != nil {
		return fail("set prefetch "+strconv.Itoa(c.prefetch), err)
	}
	if c.tx {
		if err := ch.Tx(); err != nil {
			return fail("transaction mode (tx.select)", err)
		}
		s.rt = c.t.trackReturns(ch)
	}
	if s.deliveries, err = ch.Consume(c.queue, c.tag, false, false, false, false, nil); err != nil {
		return fail(fmt.Sprintf("consume %q", c.queue), err)
	}
	return s, nil
}

// session returns the live channel, opening a new one when it was lost. One caller
// opens; the others wait for it.
func (c *consumer) session(ctx context.Context) (*session, error) {
	if s := c.sess.Load(); s != nil {
		return s, nil
	}
	select {
	case c.opening <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.kit.Done():
		return nil, transport.ErrClosed
	}
	defer func() { <-c.opening }()
	if c.closed {
		return nil, transport.ErrClosed
	}
	if s := c.sess.Load(); s != nil {
		return s, nil
	}
	// Bounded: amqp091's channel calls wait for the broker's answer without a context.
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := c.open(octx)
	if err != nil {
		return nil, err
	}
	c.sess.Store(s)
	c.t.log.Info("amqp: consumer resumed", "queue", c.queue)
	return s, nil
}

// Receive waits for the next delivery on the live channel.
func (c *consumer) Receive(ctx context.Context, into []msg) (int, error) {
	s, err := c.session(ctx)
	if err != nil {
		return 0, err
	}
	select {
	case d, ok := <-s.deliveries:
		if !ok {
			return 0, c.lose(s)
		}
		into[0] = msg{s: s, d: &d}
		return 1, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-c.kit.Done():
		return 0, transport.ErrClosed
	}
}

// lose forgets s, whose deliveries ended: its channel closed, or the broker cancelled
// the consumer (the queue was deleted), in which case closing the channel gives its
// unsettled deliveries back to the queue.
func (c *consumer) lose(s *session) error {
	if c.sess.CompareAndSwap(s, nil) && !s.ch.IsClosed() {
		_ = s.ch.Close()
	}
	select {
	case cause := <-s.closed:
		if cause != nil {
			return fmt.Errorf("%w: %w", errChannelLost, cause)
		}
	default:
	}
	return errChannelLost
}

// IsRetryable reports whether the consumer can consume again after err: not once the
// transport is closed, nor when a connection given to [New] is lost without
// [WithRedial].
func (c *consumer) IsRetryable(err error) bool {
	return !errors.Is(err, transport.ErrClosed) && !errors.Is(err, errConnectionLost)
}

// Decode turns what the broker sent into a delivery. Nothing in it can panic:
// unexpected header types are skipped.
func (c *consumer) Decode(m msg, out *transport.Delivery) { decode(m.d, out) }

func decode(d *amqp091.Delivery, out *transport.Delivery) {
	out.Body = d.Body
	if out.Body == nil {
		out.Body = []byte{}
	}
	if v, ok := d.Headers[HeaderAttempts]; ok {
		out.AttemptsHeader, out.HasAttemptsHeader = driverkit.Attempts(v)
	}
	if n, ok := driverkit.Attempts(d.Headers["x-delivery-count"]); ok && n > 0 {
		out.Redeliveries = n
	} else if d.Redelivered {
		out.Redeliveries = 1
	}
	out.Headers = userHeaders(d.Headers)
}

// userHeaders returns the out-of-band headers: everything but the projected headers
// and the ones RabbitMQ adds. Scalar values that are not strings are formatted (a
// timestamp as Unix seconds); tables and arrays are skipped.
func userHeaders(h amqp091.Table) map[string]string {
	var out map[string]string
	for k, v := range h {
		switch k {
		case HeaderSchemaVersion, HeaderSourceLang, HeaderAttempts, "x-death", "x-delivery-count":
			continue
		}
		if strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") {
			continue
		}
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case []byte:
			s = string(x)
		case bool, int8, int16, int32, int64, int, uint8, uint16, uint32, uint64, float32, float64:
			s = fmt.Sprint(x) // floats in the shortest form that reads back the same
		case amqp091.Decimal:
			s = fmt.Sprint(x.Value) + "e-" + strconv.Itoa(int(x.Scale))
		case time.Time:
			s = strconv.FormatInt(x.Unix(), 10)
		default:
			continue
		}
		if out == nil {
			out = make(map[string]string, len(h))
		}
		out[k] = s
	}
	return out
}

// Close closes the consumer's channel: the deliveries prefetched and not handed out go
// back to the broker.
func (c *consumer) Close(ctx context.Context) error {
	select {
	case c.opening <- struct{}{}:
	case <-ctx.Done(): // a channel being opened now closes with the connection
		return fmt.Errorf("amqp: close the consumer's channel: %w", ctx.Err())
	}
	c.closed = true
	s := c.sess.Swap(nil)
	<-c.opening
	if s != nil && !s.ch.IsClosed() {
		_ = s.ch.Close()
	}
	return nil
}

// Ack acknowledges the delivery on its channel.
func (c *consumer) Ack(ctx context.Context, m msg) error {
	switch {
	case c.tx:
		return c.AckWrites(ctx, m, nil)
	case m.s.ch.IsClosed():
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
		if c.tx {
			c.txRewind(ctx, m)
		} else if !m.s.ch.IsClosed() {
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

// lost is the error of a delivery whose channel died before it was settled.
func (c *consumer) lost(err error) error {
	if err == nil {
		err = ErrDeliveryLost
	} else {
		err = fmt.Errorf("%w: %w", ErrDeliveryLost, err)
	}
	return &transport.TakenBackError{Broker: "amqp", Queue: c.queue, Reason: "its channel closed", Err: err}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
