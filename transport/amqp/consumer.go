package amqp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/internal/ledger"
	"github.com/babelqueue-go/babelqueue/internal/settlepipe"
	"github.com/babelqueue-go/babelqueue/transport"
)

// Consume declares queue (a durable classic queue, unless [WithoutDeclare]) and starts
// a basic.consume on it with manual acknowledgements and a prefetch of opts.Prefetch.
// The consumer survives connection and channel loss: it resumes on a new channel.
func (t *Transport) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if queue == "" {
		return nil, errors.New("amqp: Consume: empty queue name")
	}
	prefetch := max(opts.Prefetch, 1)
	c := &consumer{
		t:        t,
		queue:    queue,
		prefetch: prefetch,
		tag:      "babelqueue-go-" + randomHex(8),
		changed:  make(chan struct{}),
		tx:       newTxSettle(opts), // move.go
		failed:   opts.SettleFailed,
		book:     ledger.New[handle](ledger.Config{Broker: "amqp", Queue: queue, Prefetch: prefetch, Logger: t.log}),
	}
	if t.s.pipeline && c.tx == nil { // a transactional consumer commits each settlement (move.go)
		c.pipe = settlepipe.New(prefetch, nil)
	}
	s, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = s.ch.Close()
		return nil, transport.ErrClosed
	}
	t.consumers[c] = struct{}{}
	t.mu.Unlock()
	c.setSession(s)
	c.wg.Add(1)
	go c.supervise(s)
	return c, nil
}

type consumer struct {
	t        *Transport
	queue    string
	prefetch int
	tag      string
	// failed is ConsumeOptions.SettleFailed: told of a pipelined settlement whose writes
	// failed after Settle returned.
	failed func(*transport.Delivery, transport.Settlement, error)

	mu      sync.Mutex
	sess    *session      // nil while reconnecting
	changed chan struct{} // closed and replaced when sess changes

	// book holds the deliveries handed out and not settled: their prefetch slots (a
	// new channel after a reconnect gets a fresh broker prefetch while deliveries of
	// the dead one are still held) and their settle state. Closing it stops the
	// consumer.
	book      *ledger.Ledger[handle]
	pipe      *settlepipe.Pipe // pipelined settlements in flight; nil when not pipelined
	closeOnce sync.Once
	wg        sync.WaitGroup

	// tx is set on a consumer opened with ConsumeOptions.Transactional (move.go).
	tx *txSettle
}

// session is one channel consuming the queue.
type session struct {
	ch         *amqp091.Channel
	deliveries <-chan amqp091.Delivery
	closed     chan *amqp091.Error
	cancelled  chan string    // the broker cancelled the consumer (queue deleted)
	rt         *returnTracker // a transactional consumer's returned writes (move.go); else nil
}

// handle is the transport's bookkeeping for one delivery.
type handle struct {
	s   *session
	tag uint64
}

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
	s := &session{ch: ch, closed: ch.NotifyClose(make(chan *amqp091.Error, 1))}
	if err := ch.Qos(c.prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp: set prefetch %d: %w", c.prefetch, err)
	}
	if err := c.txSelect(ch); err != nil { // move.go
		_ = ch.Close()
		return nil, err
	}
	if c.tx != nil { // move.go
		s.rt = c.t.trackReturns(ch)
	}
	s.cancelled = ch.NotifyCancel(make(chan string, 1))
	s.deliveries, err = ch.Consume(c.queue, c.tag, false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp: consume %q: %w", c.queue, err)
	}
	return s, nil
}

func (c *consumer) setSession(s *session) {
	c.mu.Lock()
	c.sess = s
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// supervise reopens the session whenever its channel closes, until the consumer closes.
func (c *consumer) supervise(s *session) {
	defer c.wg.Done()
	log := c.t.log.With("queue", c.queue)
	for {
		select {
		case <-c.book.Done():
			return
		case err := <-s.closed:
			c.setSession(nil)
			if err != nil {
				log.Warn("amqp: consumer channel lost; resuming", "err", err)
			} else {
				log.Warn("amqp: consumer channel closed; resuming")
			}
		case <-s.cancelled:
			c.setSession(nil)
			log.Warn("amqp: the broker cancelled the consumer; resuming")
			_ = s.ch.Close() // unsettled deliveries go back to the queue
		}
		backoff := 50 * time.Millisecond
		for {
			select {
			case <-c.book.Done():
				return
			case <-time.After(backoff):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			ns, err := c.open(ctx)
			cancel()
			if err == nil {
				select {
				case <-c.book.Done():
					_ = ns.ch.Close()
					return
				default:
				}
				s = ns
				c.setSession(s)
				log.Info("amqp: consumer resumed")
				break
			}
			if errors.Is(err, transport.ErrClosed) || errors.Is(err, errConnectionLost) {
				log.Error("amqp: consumer cannot resume", "err", err)
				return
			}
			log.Warn("amqp: consumer resume failed; retrying", "err", err, "backoff", backoff)
			// At most 2 s: the consumer resumes within about 2 s of the broker coming
			// back (the fault suite, issue 16, measured 4.9 s after a restart at 5 s).
			backoff = min(backoff*2, 2*time.Second)
		}
	}
}

// current returns the live session, waiting while the consumer reconnects. stale, when
// not nil, is a session known to be dead: wait for a different one.
func (c *consumer) current(ctx context.Context, stale *session) (*session, error) {
	for {
		c.mu.Lock()
		s, changed := c.sess, c.changed
		c.mu.Unlock()
		if s != nil && s != stale {
			return s, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.book.Done():
			return nil, transport.ErrClosed
		}
	}
}

// Receive returns the next delivery, once a prefetch slot is free.
func (c *consumer) Receive(ctx context.Context) (*transport.Delivery, error) {
	return c.book.Receive(ctx, c.receive)
}

func (c *consumer) receive(ctx context.Context) (*transport.Delivery, error) {
	if c.pipe != nil {
		if err := c.pipe.Pause(ctx, c.book.Done()); err != nil {
			return nil, err
		}
	}
	var stale *session
	for {
		s, err := c.current(ctx, stale)
		if err != nil {
			return nil, err
		}
		select {
		case d, ok := <-s.deliveries:
			if !ok {
				stale = s
				continue
			}
			e, err := c.book.Hand(handle{s: s, tag: d.DeliveryTag})
			if err != nil { // closed meanwhile: closing the channel gives it back
				return nil, err
			}
			return c.delivery(e, &d), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.book.Done():
			return nil, transport.ErrClosed
		}
	}
}

// delivery turns what the broker sent into a transport.Delivery. Nothing in it can
// panic: unexpected header types are skipped.
func (c *consumer) delivery(e *ledger.Entry[handle], d *amqp091.Delivery) *transport.Delivery {
	out := &transport.Delivery{
		Queue:  c.queue,
		Body:   d.Body,
		Handle: e,
	}
	if out.Body == nil {
		out.Body = []byte{}
	}
	if n, ok := headerInt(d.Headers[HeaderAttempts]); ok {
		out.AttemptsHeader, out.HasAttemptsHeader = n, true
	}
	if n, ok := headerInt(d.Headers["x-delivery-count"]); ok && n > 0 {
		out.Redeliveries = n
	} else if d.Redelivered {
		out.Redeliveries = 1
	}
	out.Headers = userHeaders(d.Headers)
	return out
}

// userHeaders returns the out-of-band headers: everything but the projected headers
// and the ones RabbitMQ adds. Scalar values that are not strings are formatted; tables
// and arrays are skipped.
func userHeaders(h amqp091.Table) map[string]string {
	var out map[string]string
	for k, v := range h {
		if isOwnHeader(k) {
			continue
		}
		s, ok := headerString(v)
		if !ok {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(h))
		}
		out[k] = s
	}
	return out
}

func isOwnHeader(k string) bool {
	switch k {
	case HeaderSchemaVersion, HeaderSourceLang, HeaderAttempts, "x-death", "x-delivery-count":
		return true
	}
	return strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-")
}

func headerString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	case bool:
		return strconv.FormatBool(x), true
	case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x), true
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32), true
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), true
	case amqp091.Decimal:
		return fmt.Sprint(x.Value) + "e-" + strconv.Itoa(int(x.Scale)), true
	case time.Time:
		return strconv.FormatInt(x.Unix(), 10), true
	default:
		return "", false
	}
}

// headerInt reads an integer header written by any SDK: any integer type, a whole
// float, or a decimal string.
func headerInt(v any) (int, bool) {
	var n int64
	switch x := v.(type) {
	case int8:
		n = int64(x)
	case int16:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case int:
		n = int64(x)
	case uint8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint32:
		n = int64(x)
	case uint64:
		if x > math.MaxInt32 {
			return 0, false
		}
		n = int64(x)
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) || math.IsNaN(x) || math.Abs(x) > math.MaxInt32 {
			return 0, false
		}
		n = int64(x)
	case float32:
		f := float64(x)
		if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) || math.Abs(f) > math.MaxInt32 {
			return 0, false
		}
		n = int64(f)
	case string:
		p, err := strconv.ParseInt(strings.TrimSpace(x), 10, 32)
		if err != nil {
			return 0, false
		}
		n = p
	case []byte:
		p, err := strconv.ParseInt(strings.TrimSpace(string(x)), 10, 32)
		if err != nil {
			return 0, false
		}
		n = p
	default:
		return 0, false
	}
	if n < math.MinInt32 || n > math.MaxInt32 {
		return 0, false
	}
	return int(n), true
}

// Settle finishes a delivery: Ack after the writes are confirmed, or Rewind (a nack with
// requeue). HandOff is not offered: RabbitMQ has no redrive of its own for it. A
// delivery whose channel died fails an Ack with a [transport.TakenBackError] wrapping
// [ErrDeliveryLost]; its Rewind succeeds, as the broker requeued it already. With
// pipelined settle writes (the default) an Ack with writes returns once they are
// published, and the delivery is acked or rewound when their confirms come
// ([WithPipelinedSettles]).
func (c *consumer) Settle(ctx context.Context, d *transport.Delivery, st transport.Settlement) error {
	e, err := c.book.Begin(d, st)
	if err != nil {
		return err
	}
	if c.pipe != nil && st.Outcome == transport.Ack && len(st.Writes) > 0 {
		return c.book.Finish(e, st, c.settlePipelined(ctx, e.Value, d, st))
	}
	return c.book.Finish(e, st, c.settle(ctx, e.Value, st))
}

func (c *consumer) settle(ctx context.Context, h handle, st transport.Settlement) error {
	if c.tx != nil {
		return c.settleTx(ctx, h, st) // move.go
	}
	if h.s.ch.IsClosed() {
		if st.Outcome == transport.Rewind {
			return nil // the broker redelivers it: that is what a rewind asks for
		}
		return c.lost(nil)
	}
	if st.Outcome == transport.Rewind {
		// A channel that dies meanwhile requeues the delivery by itself.
		_ = h.s.ch.Nack(h.tag, false, true)
		return nil
	}
	if err := c.t.writeConfirmed(ctx, st.Writes); err != nil {
		return err
	}
	if err := h.s.ch.Ack(h.tag, false); err != nil {
		return c.lost(err)
	}
	return nil
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

// Close cancels the consumer and closes its channel: deliveries handed out and not
// settled, and those prefetched and not handed out, go back to the broker. It first
// waits, until ctx ends, for the pipelined settlements in flight to be acked (or
// rewound) once their writes are confirmed (or fail); those still waiting then go back
// to the broker with the channel, and their writes may stay (a duplicate, never a loss).
func (c *consumer) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.book.Close() // the channel's close gives the deliveries back
		if c.pipe != nil && !c.pipe.Wait(ctx) {
			c.t.log.Warn("amqp: consumer closed before the confirms of its pipelined settle writes came; those deliveries are delivered again", "queue", c.queue)
		}
		c.wg.Wait()
		c.mu.Lock()
		s := c.sess
		c.sess = nil
		c.mu.Unlock()
		if s != nil && !s.ch.IsClosed() {
			_ = s.ch.Close()
		}
		c.t.mu.Lock()
		delete(c.t.consumers, c)
		c.t.mu.Unlock()
	})
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
