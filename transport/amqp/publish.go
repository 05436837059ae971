package amqp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
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

// maxIdleChans is how many idle confirm channels the transport keeps.
const maxIdleChans = 16

var (
	errNacked         = fmt.Errorf("amqp: the broker nacked the write: %w", transport.ErrNotConfirmed)
	errNotConfirmMode = errors.New("amqp: channel is not in confirm mode")
)

// pubChan is a channel in confirm mode, used by one write at a time.
type pubChan struct {
	ch   *amqp091.Channel
	conn *amqp091.Connection
	gen  uint64
	// timer bounds the confirm waits of the writes made on this channel. It is stopped
	// between waits and reused, so a confirmed write allocates no timer or context of
	// its own (since Go 1.23, Reset and Stop leave no stale tick in timer.C).
	timer *time.Timer
	rt    *returnTracker // the publishes the broker returned; nil when nobody checks
}

// sent is one publish: its deferred confirm, its channel and, when a waiter checks for
// its return, the tracker it is registered with.
type sent struct {
	dc  *amqp091.DeferredConfirmation
	ch  *amqp091.Channel
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
		if pc.gen == gen && !pc.ch.IsClosed() {
			t.mu.Unlock()
			return pc, nil
		}
		_ = pc.ch.Close()
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
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed && pc.gen == t.gen && len(t.idle) < maxIdleChans {
		t.idle = append(t.idle, pc)
	} else {
		_ = pc.ch.Close()
	}
}

// check refuses a message without a queue, or with a body above the broker's limit.
func (t *Transport) check(m *transport.Message) error {
	if m == nil || m.Queue == "" {
		return errors.New("amqp: message has no queue")
	}
	return transport.CheckSize("amqp", m.Queue, len(m.Body), t.s.maxSize)
}

// Publish writes m to its queue (declared on first use) and, unless
// [WithoutPublishConfirms] was given, waits for the broker's confirm.
//
// While the connection is lost Publish waits for it to come back, up to the publish
// wait ([WithPublishWait]) and until ctx ends, and then fails with
// context.DeadlineExceeded (or ctx's error) wrapped with the broker's last error. It
// makes a write again only when the broker cannot have received it (no connection, no
// channel): a write whose confirm was lost with its connection fails with an error
// matching [transport.ErrNotConfirmed], as the broker may hold it.
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	if err := t.check(m); err != nil {
		return err
	}
	return t.rideOut(ctx, m.Queue, func(wait context.Context) error {
		pc, err := t.getPub(wait)
		if err != nil {
			return err
		}
		defer t.putPub(pc)
		s, err := t.send(ctx, pc, m, !t.s.noUserConfirm)
		if err != nil || t.s.noUserConfirm {
			return err
		}
		return t.checkReturn(s, t.waitConfirm(ctx, pc, s.key.key, s.dc))
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
	if err := t.rideOut(ctx, "", func(wait context.Context) (err error) { pc, err = t.getPub(wait); return err }); err != nil {
		return err
	}
	defer t.putPub(pc)
	errs, ss := make([]error, len(msgs)), make([]sent, len(msgs))
	for i, m := range msgs {
		if errs[i] = t.check(m); errs[i] != nil {
			continue
		}
		if ss[i], errs[i] = t.send(ctx, pc, m, true); errs[i] != nil {
			for j := i + 1; j < len(msgs); j++ {
				errs[j] = transport.ErrNotAttempted
			}
			break
		}
	}
	t.awaitConfirms(ctx, pc.timer, ss, errs)
	t.checkReturns(ss, errs)
	return transport.NewBatchError(errs)
}

// send declares what m needs and publishes it on pc, mandatory. When track is set and
// pc records returns, the publish is registered there: the caller must pass the result
// to checkReturn or checkReturns once its confirm was awaited (or failed). A publish
// refused because the channel is closed was not written: its error is unsent.
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
	s := sent{ch: pc.ch, key: retKey{key, p.MessageId}}
	if track && pc.rt != nil {
		s.rt = pc.rt
		s.rt.register(s.key) // before the publish: its return may come before this call returns
	}
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, "", key, true, false, p)
	if err != nil {
		resolve(s)
		if err = fmt.Errorf("amqp: publish to %q: %w", key, err); errors.Is(err, amqp091.ErrClosed) {
			err = unsent{err}
		}
		return sent{}, err
	}
	s.dc = dc
	return s, nil
}

// waitConfirm waits for the confirm of dc, published on pc to queue, until ctx ends or
// the confirm timeout passes (reported as context.DeadlineExceeded).
func (t *Transport) waitConfirm(ctx context.Context, pc *pubChan, queue string, dc *amqp091.DeferredConfirmation) error {
	if dc == nil {
		return errNotConfirmMode
	}
	ss, errs := [1]sent{{dc: dc, ch: pc.ch, key: retKey{key: queue}}}, [1]error{}
	t.awaitConfirms(ctx, pc.timer, ss[:], errs[:])
	return errs[0]
}

// awaitConfirms waits for every confirm of ss under one deadline (the confirm timeout,
// from the first confirm not in yet, on timer or, when nil, a timer of its own) and
// records in errs each write that was not acknowledged. A write not sent (errs holds
// its error) has no confirm to wait for.
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
			case s.ch.IsClosed():
				errs[i] = fmt.Errorf("amqp: the channel of a write to %q closed before the broker confirmed it; "+
					"the broker may hold it, so it is not sent again: %w", s.key.key, transport.ErrNotConfirmed)
			default:
				errs[i] = errNacked
			}
		default:
			errs[i] = fmt.Errorf("amqp: waiting for the confirm of a write to %q: %w", s.key.key, ended)
		}
	}
	if armed {
		timer.Stop()
	}
}

// publishWrites publishes the settle writes ws on one confirm channel, which goes back
// to the idle list at once for other writers, and returns them as sent. Any failure is
// a *transport.SettleWriteError; the publishes before it stay made.
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

// confirmed waits for every confirm of ss, until ctx ends or the confirm timeout
// passes, then checks that none was returned, and returns the first failure as a
// *transport.SettleWriteError.
func (t *Transport) confirmed(ctx context.Context, ws []*transport.Message, ss []sent) error {
	var buf [4]error // the usual settlement has one write: no allocation
	errs := buf[:0]
	if len(ss) > len(buf) {
		errs = make([]error, 0, len(ss))
	}
	errs = errs[:len(ss)]
	t.awaitConfirms(ctx, nil, ss, errs)
	t.checkReturns(ss, errs)
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
