package amqp

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Consume declares queue (unless [WithoutDeclare]) and starts a basic.consume on it
// with manual acknowledgements and a prefetch of opts.Prefetch; the next Receive after a
// lost channel or connection consumes on a new channel. The receive loop, the
// settlements and Close are the kit's ([driverkit.Consumer]); Ack is basic.ack once the
// settle writes are confirmed, a Rewind basic.nack with requeue. A delivery whose channel
// died cannot be acknowledged: its Ack returns a [transport.TakenBackError] wrapping
// [ErrDeliveryLost], its Rewind succeeds (the broker requeued it already). A
// [transport.ConsumeOptions.Transactional] consumer (a DLQ redrive's) commits each
// settlement's writes and acknowledgement in one AMQP transaction on its channel.
func (t *Transport) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if queue == "" {
		return nil, errors.New("amqp: Consume: empty queue name")
	}
	prefetch := max(opts.Prefetch, 1)
	// The tag comes with every delivery: 16 characters, as long as it always was.
	c := &consumer{t: t, queue: queue, prefetch: prefetch, tag: "babelqueue-go-" + rand.Text()[:16], tx: opts.Transactional}
	c.sess = driverkit.NewAttachment(c.open)
	s, err := c.sess.Get(ctx)
	if err != nil {
		return nil, err
	}
	c.kit, err = driverkit.New[msg](c, driverkit.Config{Broker: "amqp", Queue: queue, Logger: t.log, Group: &t.consumers,
		AtomicAcks: c.tx, Pipeline: t.s.pipeline, ConfirmTimeout: t.s.confirmTimeout, ConcurrentReceive: true,
		PipelineDepth: prefetch, // the channel's basic.qos bounds them anyway
	}, opts)
	if err != nil {
		_ = s.ch.Close()
		return nil, err
	}
	c.sess.Done = c.kit.Done()
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
	sess     *driverkit.Attachment[session] // the live channel, opened again by a Receive once lost
	opened   bool                           // a channel was opened (the next is a resumption); guarded by sess
	tx       bool                           // settles in transactions (ConsumeOptions.Transactional)
	txMu     sync.Mutex                     // one transaction at a time on the channel
}

// session is one channel consuming the queue.
type session struct {
	ch         *amqp091.Channel
	deliveries <-chan amqp091.Delivery
	closed     chan *amqp091.Error
	rt         *returnTracker // a transactional consumer's returned writes; else nil
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

// txBeforeCommit, set by tests, runs between a transaction's acknowledgement and commit.
var txBeforeCommit func()

// open opens a channel consuming the queue, bounded: amqp091's channel calls wait for
// the broker's answer without a context.
func (c *consumer) open(ctx context.Context) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
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
	if c.opened {
		c.t.log.Info("amqp: consumer resumed", "queue", c.queue)
	}
	c.opened = true
	return s, nil
}

// Receive waits for the next delivery on the live channel.
func (c *consumer) Receive(ctx context.Context, into []msg) (int, error) {
	s, err := c.sess.Get(ctx)
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
	if c.sess.Lost(s) && !s.ch.IsClosed() {
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
	s, err := c.sess.Close(ctx)
	if err != nil { // a channel being opened now closes with the connection
		return fmt.Errorf("amqp: close the consumer's channel: %w", err)
	}
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

// GiveBack nacks the deliveries with requeue (a transactional consumer's each in a
// transaction). A delivery whose channel closed needs nothing: the broker requeued it
// then, as it does when a commit fails (that closes the channel).
func (c *consumer) GiveBack(ctx context.Context, ms []msg, _ driverkit.Reason) error {
	if c.tx {
		c.txMu.Lock()
		defer c.txMu.Unlock()
	}
	for _, m := range ms {
		if ch := m.s.ch; !ch.IsClosed() && ch.Nack(m.d.DeliveryTag, false, true) == nil && c.tx {
			_ = c.commit(ctx, ch)
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
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrDeliveryLost, err)
	}
	return &transport.TakenBackError{Broker: "amqp", Queue: c.queue, Reason: "its channel closed", Err: cmp.Or(err, ErrDeliveryLost)}
}

// AckWrites acknowledges m and makes its writes ws (none for a plain Ack) in one
// transaction on m's channel (a transactional consumer's settlement).
func (c *consumer) AckWrites(ctx context.Context, m msg, ws []*transport.Message) error {
	c.txMu.Lock()
	defer c.txMu.Unlock()
	ch := m.s.ch
	if ch.IsClosed() {
		return c.lost(nil)
	}
	queue := c.queue
	if len(ws) > 0 {
		queue = ws[0].Queue
	}
	conn, gen, err := c.t.connection(ctx)
	if err != nil {
		return &transport.SettleWriteError{Queue: queue, Err: err}
	}
	pc := &pubChan{ch: ch, conn: conn, gen: gen, rt: m.s.rt}
	var ss []sent
	err = driverkit.SendAll(ctx, ws, func(ctx context.Context, w *transport.Message) error {
		// Declared again (or checked) now, not taken from the cache: RabbitMQ routes a
		// transaction's publishes at the commit (docs/transports/amqp.md, Topology).
		err := c.t.check(w)
		if err == nil {
			err = c.t.ensureQueue(ctx, conn, gen, w)
		}
		if err == nil {
			var s sent
			if s, err = c.t.send(ctx, pc, w, true); err == nil {
				ss = append(ss, s)
			}
		}
		return err
	})
	if err == nil {
		if err = ch.Ack(m.d.DeliveryTag, false); err != nil {
			err = c.lost(err)
		}
	}
	if err != nil {
		resolve(ss...)
		if !ch.IsClosed() && ch.TxRollback() != nil {
			_ = ch.Close() // which rolls back too
		}
		return err
	}
	if txBeforeCommit != nil {
		txBeforeCommit()
	}
	if err := c.commit(ctx, ch); err != nil {
		resolve(ss...)
		// Rolled back, or (the connection lost after the broker committed) made: either
		// way each message is in one queue, never in both and never in none.
		return &transport.SettleWriteError{Queue: queue, Err: err}
	}
	return c.rewriteReturned(ctx, ws, ss)
}

// ensureQueue makes sure m's queue exists now, bypassing the declare cache: declared
// again, or with declare=false checked with a passive declare. A delayed write is left
// to send, which declares its delay queue.
func (t *Transport) ensureQueue(ctx context.Context, conn *amqp091.Connection, gen uint64, m *transport.Message) error {
	if m.Delay > 0 {
		return nil
	}
	if !t.s.noDeclare {
		t.forget(m.Queue)
		return t.declare(conn, gen, m.Queue, nil)
	}
	ch, _, found, err := t.inspect(ctx, "write to", m.Queue)
	if err == nil {
		_ = ch.Close()
		if !found {
			err = fmt.Errorf("amqp: write to %q: the queue does not exist (declare=false): %w", m.Queue, ErrUnroutable)
		}
	}
	return err
}

// rewriteReturned covers the window ensureQueue leaves (a target queue deleted between
// its declare and the commit): a write returned at the commit is made again, confirmed,
// outside the transaction (docs/transports/amqp.md, Topology). Only if that write fails
// too is an error returned.
func (c *consumer) rewriteReturned(ctx context.Context, writes []*transport.Message, ss []sent) error {
	if len(ss) == 0 || ss[0].rt == nil {
		return nil
	}
	ss[0].rt.sync() // tx.commit-ok is in: the returns sent on commit are buffered or recorded
	var again []*transport.Message
	for i, s := range ss {
		if returned, code, text := s.rt.resolve(s.key); returned {
			c.t.log.Warn("amqp: a moved message came back from the broker at commit (its queue was deleted); writing it again",
				"queue", s.key.key, "reply_code", code, "reply_text", text)
			c.t.forget(s.key.key)
			again = append(again, writes[i])
		}
	}
	if len(again) == 0 {
		return nil
	}
	ss, err := c.t.publishWrites(ctx, again)
	if err == nil {
		err = c.t.confirmed(ctx, again, ss)
	}
	if err != nil {
		return &transport.SettleWriteError{Queue: again[0].Queue,
			Err: fmt.Errorf("amqp: a moved message was returned at commit (its queue deleted meanwhile) and could not be written again: %w", err)}
	}
	return nil
}

// commit sends tx.commit and waits for it until ctx ends; a commit that does not
// answer closes the channel, which rolls the transaction back.
func (c *consumer) commit(ctx context.Context, ch *amqp091.Channel) error {
	done := make(chan error, 1)
	go func() { done <- ch.TxCommit() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("amqp: tx.commit: %w", err)
		}
		return nil
	case <-ctx.Done():
		_ = ch.Close()
		<-done
		return fmt.Errorf("amqp: tx.commit: %w (channel closed: rolled back unless the broker had committed)", ctx.Err())
	}
}

var (
	_ transport.Browser      = (*Transport)(nil)
	_ transport.QueueStatter = (*Transport)(nil)
)

// inspect looks queue up with a passive declare on a channel of its own (a missing
// queue closes the channel it is asked on): found is false when it does not exist. what
// names the operation in errors. The caller closes ch when err is nil.
func (t *Transport) inspect(ctx context.Context, what, queue string) (ch *amqp091.Channel, q amqp091.Queue, found bool, err error) {
	conn, _, err := t.connection(ctx)
	if err != nil {
		return nil, q, false, err
	}
	if ch, err = conn.Channel(); err != nil {
		return nil, q, false, fmt.Errorf("amqp: %s: open channel: %w", what, err)
	}
	q, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if ae := (*amqp091.Error)(nil); errors.As(err, &ae) && ae.Code == amqp091.NotFound {
		return ch, q, false, nil
	} else if err != nil {
		_ = ch.Close()
		return nil, q, false, fmt.Errorf("amqp: %s %q: %w", what, queue, err)
	}
	return ch, q, true, nil
}

// Browse reads up to limit messages of queue from the place from without consuming
// them: on a channel of its own it gets (basic.get, manual acknowledgement) the first
// from+limit+1 messages, then gives all of them back at once (basic.nack, requeue), so
// RabbitMQ puts each back at its place in the queue. RabbitMQ has no other way to look
// into a queue, and it leaves two marks: the messages lent are flagged redelivered,
// and a quorum queue (declared elsewhere) counts a delivery for each, which its
// delivery-limit sees. While a page is read its messages are held, not handed to
// consumers. Reading a page costs the messages before it too (a page far into a long
// queue reads everything in front of it); the cursor is a place in the queue
// ([transport.OffsetCursor]). A queue that does not exist is empty: Browse declares
// nothing.
func (t *Transport) Browse(ctx context.Context, queue string, from transport.Cursor, limit int) (transport.Page, error) {
	off, limit, err := driverkit.OffsetBrowse("amqp", queue, from, limit)
	if err != nil {
		return transport.Page{}, err
	}
	ch, _, found, err := t.inspect(ctx, "browse", queue)
	if err != nil {
		return transport.Page{}, err
	}
	defer func() { _ = ch.Close() }() // anything still unacknowledged goes back too
	if !found {
		return transport.Page{Next: from, End: true}, nil
	}
	var got []amqp091.Delivery
	for len(got) <= off+limit {
		if err = ctx.Err(); err != nil {
			break
		}
		d, ok, gerr := ch.Get(queue, false)
		if err = gerr; !ok {
			break
		}
		got = append(got, d)
	}
	if n := len(got); n > 0 { // all back at once
		if nerr := ch.Nack(got[n-1].DeliveryTag, true, true); err == nil && nerr != nil {
			err = fmt.Errorf("give the messages back: %w", nerr)
		}
	}
	if err != nil {
		return transport.Page{}, fmt.Errorf("amqp: browse %q: %w", queue, err)
	}
	return driverkit.OffsetPage(off, limit, got, func(m amqp091.Delivery) *transport.Delivery {
		d := &transport.Delivery{Queue: queue}
		decode(&m, d)
		d.Redeliveries = 0 // the flag is the browse's own doing
		return d
	}), nil
}

// QueueStats asks RabbitMQ for the queue with a passive declare (queue.declare-ok
// carries its message count): Ready is the messages ready for delivery. InFlight,
// Delayed and Appended are [transport.UnknownCount]: AMQP does not report the
// messages delivered and unacknowledged (the management plugin does), delayed
// messages wait on per-delay queues of their own, and a queue keeps no count of what
// went through it. Oldest is unknown (zero): AMQP does not tell it, and a basic.get to
// look would mark the message redelivered. A queue that does not exist has Exists
// false; nothing is declared.
func (t *Transport) QueueStats(ctx context.Context, queue string) (transport.QueueStats, error) {
	s := transport.QueueStats{InFlight: transport.UnknownCount, Delayed: transport.UnknownCount, Appended: transport.UnknownCount}
	if queue == "" {
		return s, errors.New("amqp: stats: empty queue name")
	}
	ch, q, found, err := t.inspect(ctx, "stats", queue)
	if err != nil {
		return s, err
	}
	_ = ch.Close()
	s.Exists, s.Ready = found, int64(q.Messages)
	return s, nil
}
