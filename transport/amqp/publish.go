package amqp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// The names of the projected headers (manifest block "rabbitmq").
const (
	HeaderSchemaVersion = "x-schema-version"
	HeaderSourceLang    = "x-source-lang"
	HeaderAttempts      = "x-attempts"
)

// AppID is the app_id property of every message the transport writes.
const AppID = "babelqueue"

// ContentType is the content_type property of every message the transport writes.
const ContentType = "application/json"

var _ transport.ConfirmedPublisher = (*Transport)(nil)

const maxIdleChans = 16 // idle confirm channels kept

var (
	errNacked         = fmt.Errorf("amqp: the broker nacked the write: %w", transport.ErrNotConfirmed)
	errNotConfirmMode = errors.New("amqp: channel is not in confirm mode")
)

// pubChan is a channel in confirm mode, used by one write at a time. Its timer bounds
// the confirm waits of its writes, stopped between waits and reused: a confirmed write
// allocates no timer of its own (since Go 1.23 Reset and Stop leave no stale tick).
type pubChan struct {
	ch    *amqp091.Channel
	conn  *amqp091.Connection
	gen   uint64
	timer *time.Timer
	rt    *returnTracker // the publishes the broker returned; nil when nobody checks
	// nacked says the broker nacked a write of this channel. It is not used again: a
	// channel that wrote to a quorum queue while the queue had no leader goes on nacking
	// its writes to that queue after another node was elected, until the old leader is
	// back (seen on RabbitMQ 3.10), where a new channel's writes are confirmed at once.
	nacked atomic.Bool
}

// sent is one publish: its confirm, its channel, and the tracker of its return.
type sent struct {
	dc  *amqp091.DeferredConfirmation
	pc  *pubChan
	rt  *returnTracker
	key retKey
}

// getPub returns an idle confirm channel of the current connection, or opens one.
func (t *Transport) getPub(ctx context.Context) (*pubChan, error) {
	conn, gen, err := t.connection(ctx)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	for n := len(t.idle) - 1; n >= 0; n-- {
		pc := t.idle[n]
		t.idle[n], t.idle = nil, t.idle[:n]
		if pc.gen == gen && !pc.ch.IsClosed() && !pc.nacked.Load() {
			t.mu.Unlock()
			return pc, nil
		}
		t.retire(pc)
	}
	t.mu.Unlock()
	ch, err := conn.Channel()
	if err == nil {
		if err = ch.Confirm(false); err != nil {
			_ = ch.Close()
		}
	}
	if err != nil {
		return nil, lostWith(conn, fmt.Errorf("amqp: open a confirm channel: %w", err))
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	return &pubChan{ch: ch, conn: conn, gen: gen, timer: timer, rt: t.trackReturns(ch)}, nil
}

// putPub returns a channel to the idle list, or closes it.
func (t *Transport) putPub(pc *pubChan) {
	if pc.ch.IsClosed() {
		return
	}
	_, gen, _ := t.conn.Current()
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.consumers.Closed() && pc.gen == gen && len(t.idle) < maxIdleChans && !pc.nacked.Load() {
		t.idle = append(t.idle, pc)
	} else {
		t.retire(pc)
	}
}

// retire closes a channel that is not used again. A nacked one is closed once the
// confirms of its other writes had their time (the confirm timeout): the settle writes
// of another caller may still wait on it.
func (t *Transport) retire(pc *pubChan) {
	if !pc.nacked.Load() {
		_ = pc.ch.Close()
		return
	}
	time.AfterFunc(t.s.confirmTimeout, func() { _ = pc.ch.Close() })
}

// check refuses a message without a queue, or with a body above the broker's limit.
func (t *Transport) check(m *transport.Message) error {
	if m == nil || m.Queue == "" {
		return errors.New("amqp: message has no queue")
	}
	return t.s.CheckSize(m.Queue, len(m.Body), 0)
}

// Publish writes m to its queue (declared on first use) and, unless
// [WithoutPublishConfirms] was given, waits for the broker's confirm.
//
// While the connection is lost Publish waits for it to come back, up to the publish
// wait ([WithPublishWait]) and until ctx ends, and then fails with
// context.DeadlineExceeded (or ctx's error) wrapped with the broker's last error. It
// makes a write again only when the broker cannot have received it (no connection, no
// channel): a write the broker may hold (its confirm lost with its connection, or its
// socket write failed on the way) fails with an error matching
// [transport.ErrNotConfirmed].
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	if err := t.check(m); err != nil {
		return err
	}
	return t.rideOut(ctx, func(wait context.Context) error {
		pc, err := t.getPub(wait)
		if err != nil {
			return err
		}
		defer t.putPub(pc)
		s, err := t.send(ctx, pc, m, !t.s.noUserConfirm)
		if err != nil || t.s.noUserConfirm {
			return err
		}
		errs := [1]error{}
		t.awaitConfirms(ctx, pc.timer, []sent{s}, errs[:])
		return errs[0]
	})
}

// PublishConfirmed publishes msgs in order on one confirm channel, every publish in
// flight at once, then waits for all their confirms together, up to the confirm timeout
// counted once the publishes are made. It confirms even with [WithoutPublishConfirms]
// (which only concerns [Transport.Publish]), and waits for a lost connection as Publish
// does. When some messages were not confirmed (nacked, timed out, or not sent because
// the channel failed; those after a failed send are reported with
// [transport.ErrNotAttempted]) the error is a *[transport.BatchError].
func (t *Transport) PublishConfirmed(ctx context.Context, msgs []*transport.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	var pc *pubChan
	if err := t.rideOut(ctx, func(wait context.Context) (err error) { pc, err = t.getPub(wait); return err }); err != nil {
		return err
	}
	defer t.putPub(pc)
	return driverkit.PublishInOrder(ctx, msgs, t.check,
		func(ctx context.Context, m *transport.Message) (sent, error) { return t.send(ctx, pc, m, true) },
		func(ctx context.Context, ss []sent, errs []error) { t.awaitConfirms(ctx, pc.timer, ss, errs) })
}

// send declares what m needs and publishes it on pc, mandatory; with track it is
// registered for its return, which awaitConfirms checks (or resolve forgets). A publish
// refused because the channel is closed was not written: its error is unsent. One whose
// write failed may have gone out whole (amqp091 writes through a buffer that other
// publishes flush too): its error matches ErrNotConfirmed.
func (t *Transport) send(ctx context.Context, pc *pubChan, m *transport.Message, track bool) (sent, error) {
	key := m.Queue
	if !t.s.noDeclare {
		if err := t.declare(pc.conn, pc.gen, m.Queue, nil); err != nil {
			return sent{}, err
		}
	}
	if m.Delay > 0 {
		key = DelayQueue(m.Queue, m.Delay)
		args := amqp091.Table{"x-message-ttl": delayMillis(m.Delay), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": m.Queue}
		if err := t.declare(pc.conn, pc.gen, key, args); err != nil {
			return sent{}, err
		}
	}
	p := project(m)
	s := sent{pc: pc, key: retKey{key, p.MessageId}}
	if track && pc.rt != nil {
		s.rt = pc.rt
		s.rt.register(s.key) // before the publish: its return may come before this call returns
	}
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, "", key, true, false, p)
	switch {
	case err == nil:
		s.dc = dc
		return s, nil
	case errors.Is(err, amqp091.ErrClosed): // refused before a byte was written
		err = driverkit.Unsent(fmt.Errorf("amqp: publish to %q: %w", key, err))
	case ctx.Err() == nil: // a write that failed on the way: its bytes may have gone out whole
		err = fmt.Errorf("amqp: publish to %q failed while written (the broker may hold it, so it is not sent again): %w: %w",
			key, err, transport.ErrNotConfirmed)
	}
	resolve(s)
	return sent{}, err
}

// awaitConfirms waits for every confirm of ss under one deadline (the confirm timeout,
// from the first confirm not in yet, on timer or, when nil, a timer of its own), then
// checks their returns: errs[i] is ss[i]'s outcome. A write not sent (errs holds its
// error) has no confirm to wait for.
func (t *Transport) awaitConfirms(ctx context.Context, timer *time.Timer, ss []sent, errs []error) {
	var ended error // set once the deadline or ctx ended the wait
	armed := false
	for i, s := range ss {
		if s.dc == nil {
			if errs[i] == nil {
				errs[i] = errNotConfirmMode
			}
			continue
		}
		if ended == nil {
			select {
			case <-s.dc.Done():
			default:
				if !armed {
					armed = true
					if timer == nil {
						timer = time.NewTimer(t.s.confirmTimeout)
					} else {
						timer.Reset(t.s.confirmTimeout)
					}
				}
				select {
				case <-s.dc.Done():
				case <-ctx.Done():
					ended = ctx.Err()
				case <-timer.C:
					ended = context.DeadlineExceeded
				}
			}
		}
		select {
		case <-s.dc.Done():
			switch {
			case s.dc.Acked():
			case s.pc.ch.IsClosed():
				errs[i] = fmt.Errorf("amqp: the channel of a write to %q closed before the broker confirmed it; "+
					"the broker may hold it, so it is not sent again: %w", s.key.key, transport.ErrNotConfirmed)
			default:
				s.pc.nacked.Store(true)
				errs[i] = errNacked
			}
		default:
			errs[i] = fmt.Errorf("amqp: waiting for the confirm of a write to %q: %w", s.key.key, ended)
		}
	}
	if armed {
		timer.Stop()
	}
	t.checkReturns(ss, errs)
}

// publishWrites publishes the settle writes ws on one confirm channel (back to the
// idle list at once). A failure is a *transport.SettleWriteError; earlier writes stay.
func (t *Transport) publishWrites(ctx context.Context, ws []*transport.Message) ([]sent, error) {
	for _, m := range ws {
		if err := t.check(m); err != nil {
			return nil, &transport.SettleWriteError{Queue: m.Queue, Err: err}
		}
	}
	pc, err := t.getPub(ctx)
	if err != nil {
		return nil, &transport.SettleWriteError{Queue: ws[0].Queue, Err: err}
	}
	defer t.putPub(pc)
	ss := make([]sent, 0, len(ws))
	err = driverkit.SendAll(ctx, ws, func(ctx context.Context, m *transport.Message) error {
		s, err := t.send(ctx, pc, m, true)
		if err == nil {
			ss = append(ss, s)
		}
		return err
	})
	if err != nil {
		resolve(ss...)
		return nil, err
	}
	return ss, nil
}

// confirmed awaits the confirms of ss and returns the first failure as a
// *transport.SettleWriteError.
func (t *Transport) confirmed(ctx context.Context, ws []*transport.Message, ss []sent) error {
	var buf [4]error // the usual settlement has one write: no allocation
	errs := buf[:min(len(ss), len(buf))]
	if len(ss) > len(buf) {
		errs = make([]error, len(ss))
	}
	t.awaitConfirms(ctx, nil, ss, errs)
	for i, err := range errs {
		if err != nil {
			return &transport.SettleWriteError{Queue: ws[i].Queue, Err: err}
		}
	}
	return nil
}

func delayMillis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return min(max(ms, 1), int64(MaxDelay/time.Millisecond))
}

// DelayQueue names the queue that holds messages for queue delayed by d:
// "<queue>.delay.<milliseconds>", d rounded up to a whole millisecond. It is declared
// on demand with x-message-ttl = the milliseconds and dead-lettering to queue through
// the default exchange, so RabbitMQ moves a message to queue when its TTL expires;
// one TTL per queue means a long delay never holds up a short one.
func DelayQueue(queue string, d time.Duration) string {
	return queue + ".delay." + strconv.FormatInt(delayMillis(d), 10)
}

// project builds the AMQP message for m: the body unchanged, the out-of-band headers,
// then the projected properties and headers, which win a name collision.
func project(m *transport.Message) amqp091.Publishing {
	p := m.Projection
	h := make(amqp091.Table, len(m.Headers)+3)
	for k, v := range m.Headers {
		h[k] = v
	}
	if p.SchemaVersion != 0 {
		h[HeaderSchemaVersion] = nativeInt(int64(p.SchemaVersion))
	}
	if p.Lang != "" {
		h[HeaderSourceLang] = p.Lang
	}
	h[HeaderAttempts] = nativeInt(int64(m.Attempts))
	return amqp091.Publishing{Headers: h, ContentType: ContentType, DeliveryMode: amqp091.Persistent,
		CorrelationId: p.TraceID, MessageId: p.MessageID, Type: p.URN, AppId: AppID, Body: m.Body}
}

// nativeInt keeps small numbers a 32-bit field-table integer, as the other SDKs write
// them, and larger ones 64-bit.
func nativeInt(n int64) any {
	if n >= math.MinInt32 && n <= math.MaxInt32 {
		return int32(n)
	}
	return n
}

// Unroutable writes (docs/transports/amqp.md, Topology): a goroutine per confirm channel
// records the returns (amqp091-go drops one not taken within 5 s); the waiter of an acked
// confirm has the buffered ones recorded (sync), then looks for its own (resolve).

// ErrUnroutable matches the error of a write RabbitMQ returned because no queue took it:
// the queue does not exist (deleted while the application runs, or never declared with
// declare=false). The message was not enqueued. The transport forgets that it declared
// the queue, so its next write to it declares it again (unless [WithoutDeclare]).
var ErrUnroutable = errors.New("amqp: message unroutable: no queue took it (the queue does not exist)")

// returnBuffer is the capacity of a NotifyReturn channel: it only absorbs bursts.
const returnBuffer = 16

// retKey identifies a publish for the returns: its routing key and message id.
type retKey struct{ key, id string }

// retState is what is known of the publishes in flight under one retKey.
type retState struct {
	n        int    // publishes registered and not resolved
	returned bool   // a return came for the key while they were in flight
	code     uint16 // the first return's reply code and text
	text     string
}

// returnTracker records the returns of one confirm channel.
type returnTracker struct {
	t     *Transport
	ch    chan amqp091.Return
	syncs chan chan struct{} // a waiter's sync, answered once the returns buffered before it are recorded
	done  chan struct{}      // closed once the channel closed and every return it carried is recorded

	mu      sync.Mutex
	pending map[retKey]retState
}

// trackReturns drains ch's returns into a new tracker until ch closes.
func (t *Transport) trackReturns(ch *amqp091.Channel) *returnTracker {
	r := &returnTracker{t: t, ch: make(chan amqp091.Return, returnBuffer), syncs: make(chan chan struct{}),
		done: make(chan struct{}), pending: make(map[retKey]retState)}
	ch.NotifyReturn(r.ch)
	go r.run()
	return r
}

// run records the returns as they come, and serves a sync by recording every return
// buffered first (it alone receives from r.ch, so what it received before is recorded).
func (r *returnTracker) run() {
	defer close(r.done)
	for {
		select {
		case ret, ok := <-r.ch:
			if !ok {
				return
			}
			r.note(ret)
		case served := <-r.syncs:
			for len(r.ch) > 0 {
				r.note(<-r.ch)
			}
			served <- struct{}{}
		}
	}
}

// note records one return. One that no publish in flight is registered for (one not
// waiting for its confirm, or one that failed already) is logged, and its queue is
// declared again; forget runs apart, as note never waits for the transport's lock.
func (r *returnTracker) note(ret amqp091.Return) {
	k := retKey{ret.RoutingKey, ret.MessageId}
	r.mu.Lock()
	st, waited := r.pending[k]
	if waited && !st.returned {
		st.returned, st.code, st.text = true, ret.ReplyCode, ret.ReplyText
		r.pending[k] = st
	}
	r.mu.Unlock()
	if !waited {
		r.t.log.Warn("amqp: the broker returned a message it could not route: its queue does not exist, and the message was not enqueued",
			"queue", ret.RoutingKey, "message_id", ret.MessageId, "reply_code", ret.ReplyCode, "reply_text", ret.ReplyText)
		go r.t.forget(ret.RoutingKey)
	}
}

// register records a publish about to be sent under k.
func (r *returnTracker) register(k retKey) {
	r.mu.Lock()
	st := r.pending[k]
	st.n++
	r.pending[k] = st
	r.mu.Unlock()
}

// resolve forgets one publish registered under k and reports whether a return came for
// k while it was in flight (with the reply code and text). Call sync first when the
// publish was acked, so that its return, if any, is recorded.
func (r *returnTracker) resolve(k retKey) (returned bool, code uint16, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.pending[k]
	if st.n--; st.n <= 0 {
		delete(r.pending, k)
	} else {
		r.pending[k] = st
	}
	return st.returned, st.code, st.text
}

// sync returns once every return handed to the listener before the call is recorded.
func (r *returnTracker) sync() {
	served := syncReplies.Get().(chan struct{})
	defer syncReplies.Put(served)
	select {
	case r.syncs <- served:
		<-served
	case <-r.done:
	}
}

// syncReplies are the channels syncs are answered on (buffered, reused: a confirmed
// write allocates none of its own).
var syncReplies = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// resolve forgets the publishes of ss registered for their returns.
func resolve(ss ...sent) {
	for _, s := range ss {
		if s.rt != nil {
			s.rt.resolve(s.key)
		}
	}
}

// checkReturns resolves the publishes of ss, whose confirms' outcomes are errs: one
// acked and returned gets an error wrapping [ErrUnroutable], and its queue is forgotten.
func (t *Transport) checkReturns(ss []sent, errs []error) {
	var last *returnTracker
	for i, s := range ss {
		if s.rt == nil {
			continue
		}
		if errs[i] == nil && s.rt != last {
			s.rt.sync() // one sync serves every publish acked before it
			last = s.rt
		}
		if returned, code, text := s.rt.resolve(s.key); errs[i] == nil && returned {
			t.forget(s.key.key)
			errs[i] = fmt.Errorf("amqp: write to %q returned by the broker (%d %s): %w", s.key.key, code, text, ErrUnroutable)
		}
	}
}
