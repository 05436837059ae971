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

// pubChan is a channel in confirm mode, used by one write at a time.
type pubChan struct {
	ch   *amqp091.Channel
	conn *amqp091.Connection
	gen  uint64
	// timer bounds each confirm wait on this channel. It is stopped between waits and
	// reused, so a confirmed write allocates no timer or context of its own (since Go
	// 1.23, Reset and Stop leave no stale tick in timer.C).
	timer *time.Timer
	// rt records the publishes the broker returned (returns.go); nil on a channel whose
	// returns nobody checks (a transactional consumer's).
	rt *returnTracker
}

// getPub returns an idle confirm channel of the current connection, or opens one.
func (t *Transport) getPub(ctx context.Context) (*pubChan, error) {
	conn, gen, err := t.connection(ctx)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	for len(t.idle) > 0 {
		pc := t.idle[len(t.idle)-1]
		t.idle[len(t.idle)-1] = nil
		t.idle = t.idle[:len(t.idle)-1]
		if pc.gen == gen && !pc.ch.IsClosed() {
			t.mu.Unlock()
			return pc, nil
		}
		_ = pc.ch.Close()
	}
	t.mu.Unlock()
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp: open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp: confirm mode: %w", err)
	}
	rt := t.trackReturns(ch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	return &pubChan{ch: ch, conn: conn, gen: gen, timer: timer, rt: rt}, nil
}

// putPub returns a channel to the idle list, or closes it.
func (t *Transport) putPub(pc *pubChan) {
	if pc.ch.IsClosed() {
		return
	}
	t.mu.Lock()
	if !t.closed && pc.gen == t.gen && len(t.idle) < t.s.maxIdleChans {
		t.idle = append(t.idle, pc)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	_ = pc.ch.Close()
}

// Publish writes m to its queue (declared on first use) and, unless
// [WithoutPublishConfirms] was given, waits for the broker's confirm.
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	if m == nil || m.Queue == "" {
		return errors.New("amqp: message has no queue")
	}
	if err := transport.CheckSize("amqp", m.Queue, len(m.Body), t.s.maxSize); err != nil {
		return err
	}
	pc, err := t.getPub(ctx)
	if err != nil {
		return err
	}
	s, err := t.send(ctx, pc, m, !t.s.noUserConfirm)
	if err != nil {
		t.putPub(pc)
		return err
	}
	if t.s.noUserConfirm {
		t.putPub(pc)
		return nil
	}
	err = t.checkReturn(s, t.waitConfirm(ctx, pc, m.Queue, s.dc))
	t.putPub(pc)
	return err
}

var errNacked = errors.New("amqp: broker nacked the write (or its channel closed before the confirm)")

// waitConfirm waits for the confirm of dc, published on pc, until ctx ends or the
// confirm timeout passes (reported as context.DeadlineExceeded).
func (t *Transport) waitConfirm(ctx context.Context, pc *pubChan, queue string, dc *amqp091.DeferredConfirmation) error {
	if dc == nil {
		return errors.New("amqp: channel is not in confirm mode")
	}
	select {
	case <-dc.Done():
	default:
		pc.timer.Reset(t.s.confirmTimeout)
		var err error
		select {
		case <-dc.Done():
		case <-ctx.Done():
			err = ctx.Err()
		case <-pc.timer.C:
			err = context.DeadlineExceeded
		}
		pc.timer.Stop()
		if err != nil {
			return fmt.Errorf("amqp: waiting for the confirm of a write to %q: %w", queue, err)
		}
	}
	if !dc.Acked() {
		return errNacked
	}
	return nil
}

// send declares what m needs and publishes it on pc, mandatory. When track is set and
// pc records returns, the publish is registered there: the caller must pass the result
// to checkReturn or checkReturns once its confirm was awaited (or failed).
func (t *Transport) send(ctx context.Context, pc *pubChan, m *transport.Message, track bool) (sent, error) {
	if !t.s.noDeclare {
		if err := t.declare(pc.conn, pc.gen, m.Queue, nil); err != nil {
			return sent{}, err
		}
	}
	key := m.Queue
	if m.Delay > 0 {
		ms := delayMillis(m.Delay)
		key = DelayQueue(m.Queue, m.Delay)
		args := amqp091.Table{
			"x-message-ttl":             ms,
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": m.Queue,
		}
		if err := t.declare(pc.conn, pc.gen, key, args); err != nil {
			return sent{}, err
		}
	}
	p := project(m)
	var s sent
	if track && pc.rt != nil {
		// Registered before the publish: its return may come before this call returns.
		s.rt, s.key = pc.rt, retKey{key, p.MessageId}
		s.rt.register(s.key)
	}
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, "", key, true, false, p)
	if err != nil {
		if s.rt != nil {
			s.rt.resolve(s.key)
		}
		return sent{}, fmt.Errorf("amqp: publish to %q: %w", key, err)
	}
	s.dc = dc
	return s, nil
}

func delayMillis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return min(max(ms, 1), int64(MaxDelay/time.Millisecond))
}

// DelayQueue names the queue that holds messages for queue delayed by d:
// "<queue>.delay.<milliseconds>".
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
	return amqp091.Publishing{
		Headers:       h,
		ContentType:   ContentType,
		DeliveryMode:  amqp091.Persistent,
		CorrelationId: p.TraceID,
		MessageId:     p.MessageID,
		Type:          p.URN,
		AppId:         AppID,
		Body:          m.Body,
	}
}

// nativeInt keeps small numbers a 32-bit field-table integer, as the other SDKs write
// them, and larger ones 64-bit.
func nativeInt(n int64) any {
	if n >= math.MinInt32 && n <= math.MaxInt32 {
		return int32(n)
	}
	return n
}
