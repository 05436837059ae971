package servicebus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/settle"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

const orderBody = `{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":0}`

// runApp builds a runtime on tr for the queue "orders"; start runs it.
func runApp(t *testing.T, tr transport.Transport, opts ...babelqueue.Option) *babelqueue.App {
	t.Helper()
	opts = append([]babelqueue.Option{babelqueue.WithQueue("orders"), babelqueue.WithLogger(slog.New(slog.DiscardHandler)),
		babelqueue.WithShutdownGrace(2 * time.Second)}, opts...)
	a, err := babelqueue.New(tr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func start(t *testing.T, a *babelqueue.App) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return")
			}
			_ = a.Close(context.Background())
		})
	}
	t.Cleanup(stop)
	return stop
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPoisonWithDLQOffGoesToTheNativeDeadLetterSubQueue: with the runtime's DLQ off, a
// poison body is abandoned until MaxDeliveryCount, so Service Bus's own dead-letter
// sub-queue takes it; it is never handed to a handler, never re-published, never dropped.
func TestPoisonWithDLQOffGoesToTheNativeDeadLetterSubQueue(t *testing.T) {
	b := newFakeBroker()
	b.maxDeliveryCount = 4
	poison := []byte("not json \xff")
	b.inject("orders", &azservicebus.Message{Body: poison}, 0)
	a := runApp(t, openFake(t, b))
	var handled atomic.Int32
	a.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error { handled.Add(1); return nil })
	stop := start(t, a)
	eventually(t, "the native dead-letter sub-queue", func() bool { return len(b.deadLettered("orders")) == 1 })
	stop()
	dl := b.deadLettered("orders")[0]
	if !bytes.Equal(dl.m.Body, poison) {
		t.Errorf("native DLQ body = %q, want the original bytes", dl.m.Body)
	}
	if dl.deliveryCount != 4 || dl.deadLetterReason != "MaxDeliveryCountExceeded" {
		t.Errorf("dead-lettered after %d deliveries (%s), want 4 (MaxDeliveryCountExceeded)", dl.deliveryCount, dl.deadLetterReason)
	}
	if w, l := b.counts("orders"); w != 0 || l != 0 {
		t.Errorf("orders still holds %d waiting and %d locked messages; nothing may be re-published", w, l)
	}
	if w, _ := b.counts("orders.dlq"); w != 0 {
		t.Errorf("the runtime wrote %d messages to orders.dlq with its DLQ off", w)
	}
	if handled.Load() != 0 {
		t.Error("a poison body reached a handler")
	}
}

// TestSchemaGate: bq-schema-version is gated as typed. The string "1" and the integer 1
// of any width pass (and the body is still checked); a float, a boolean and other
// strings are rejected without decoding: with the DLQ on the body goes to orders.dlq
// byte-identical, with it off it is abandoned until the native dead-letter sub-queue.
func TestSchemaGate(t *testing.T) {
	type tc struct {
		name string
		v    any
		pass bool
	}
	cases := []tc{
		{"absent", nil, true},
		{"string-1", "1", true},
		{"empty", "", true},
		{"blank", " \t\r\n\v\f", true},
		{"int32-1", int32(1), true},
		{"int64-1", int64(1), true},
		{"uint8-1", uint8(1), true},
		{"int16-1", int16(1), true},
		{"uint64-1", uint64(1), true},
		{"string-2", "2", false},
		{"string-x", "x", false},
		{"string-01", "01", false},
		{"string-space-1", " 1", false},
		{"float-1", float64(1), false},
		{"float32-1", float32(1), false},
		{"bool", true, false},
		{"int-2", int32(2), false},
		{"binary-1", []byte("1"), false},
		{"uint64-huge", uint64(1<<64 - 1), false},
		{"timestamp", time.Unix(1, 0), false},
	}
	for _, dlqOn := range []bool{true, false} {
		t.Run(fmt.Sprintf("dlq=%v", dlqOn), func(t *testing.T) {
			b := newFakeBroker()
			b.maxDeliveryCount = 3
			for i, c := range cases {
				body := strings.Replace(orderBody, `"order_id":1042`, fmt.Sprintf(`"order_id":%d`, i), 1)
				m := &azservicebus.Message{Body: []byte(body)}
				if c.name != "absent" {
					m.ApplicationProperties = map[string]any{PropSchemaVersion: c.v}
				}
				b.inject("orders", m, 0)
			}
			a := runApp(t, openFake(t, b), babelqueue.WithDeadLetter(dlqOn))
			var mu sync.Mutex
			handled := map[int]bool{}
			a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
				var v struct {
					OrderID int `json:"order_id"`
				}
				if err := m.Bind(&v); err != nil {
					return err
				}
				mu.Lock()
				handled[v.OrderID] = true
				mu.Unlock()
				return nil
			})
			stop := start(t, a)
			var want, rejected int
			for _, c := range cases {
				if c.pass {
					want++
				} else {
					rejected++
				}
			}
			eventually(t, "every message settled", func() bool {
				mu.Lock()
				n := len(handled)
				mu.Unlock()
				w, l := b.counts("orders")
				if dlqOn {
					dw, _ := b.counts("orders.dlq")
					return n == want && w == 0 && l == 0 && dw == rejected
				}
				return n == want && w == 0 && l == 0 && len(b.deadLettered("orders")) == rejected
			})
			stop()
			var got []*fakeMsg
			if dlqOn {
				got = b.waitingMessages("orders.dlq")
				if n := len(b.deadLettered("orders")); n != 0 {
					t.Errorf("%d messages reached the native sub-queue with the runtime's DLQ on", n)
				}
			} else {
				got = b.deadLettered("orders")
				if w, _ := b.counts("orders.dlq"); w != 0 {
					t.Errorf("%d messages reached orders.dlq with the DLQ off", w)
				}
			}
			rejectedBodies := map[string]bool{}
			for _, m := range got {
				rejectedBodies[string(m.m.Body)] = true
				if bytes.Contains(m.m.Body, []byte("dead_letter")) {
					t.Errorf("a schema rejection carries a dead_letter block: %s", m.m.Body)
				}
			}
			for i, c := range cases {
				body := strings.Replace(orderBody, `"order_id":1042`, fmt.Sprintf(`"order_id":%d`, i), 1)
				mu.Lock()
				h := handled[i]
				mu.Unlock()
				if c.pass && !h {
					t.Errorf("%s (%#v): not handled, want it to pass the gate", c.name, c.v)
				}
				if !c.pass && (h || !rejectedBodies[body]) {
					t.Errorf("%s (%#v): handled=%v, rejected byte-identical=%v; want rejected", c.name, c.v, h, rejectedBodies[body])
				}
			}
		})
	}
}

// TestSchemaGateStillChecksTheBody: a "1" property does not skip the body's own
// meta.schema_version check.
func TestSchemaGateStillChecksTheBody(t *testing.T) {
	b := newFakeBroker()
	body := strings.Replace(orderBody, `"schema_version":1`, `"schema_version":2`, 1)
	b.inject("orders", &azservicebus.Message{Body: []byte(body), ApplicationProperties: map[string]any{PropSchemaVersion: "1"}}, 0)
	a := runApp(t, openFake(t, b), babelqueue.WithDeadLetter(true))
	var handled atomic.Int32
	a.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error { handled.Add(1); return nil })
	stop := start(t, a)
	eventually(t, "the dead-letter write", func() bool { w, _ := b.counts("orders.dlq"); return w == 1 })
	stop()
	if handled.Load() != 0 {
		t.Error("an envelope with meta.schema_version 2 reached the handler")
	}
}

// TestRetryTiersUseScheduledEnqueueTime: a retry with a tier is sent with
// ScheduledEnqueueTime = now + tier and only becomes receivable then.
func TestRetryTiersUseScheduledEnqueueTime(t *testing.T) {
	b := newFakeBroker()
	fixed := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tr := openFake(t, b, func(c *config) { c.now = func() time.Time { return fixed } })
	b.inject("orders", &azservicebus.Message{Body: []byte(orderBody)}, 0)
	a := runApp(t, tr, babelqueue.WithRetryTiers(90*time.Second), babelqueue.WithMaxAttempts(3))
	var calls atomic.Int32
	a.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		calls.Add(1)
		return errors.New("later")
	})
	stop := start(t, a)
	eventually(t, "the scheduled retry", func() bool {
		w := b.waitingMessages("orders")
		return len(w) == 1 && bytes.Contains(w[0].m.Body, []byte(`"attempts":1`))
	})
	stop()
	m := b.waitingMessages("orders")[0]
	if m.m.ScheduledEnqueueTime == nil || !m.m.ScheduledEnqueueTime.Equal(fixed.Add(90*time.Second)) {
		t.Fatalf("retry ScheduledEnqueueTime = %v, want %v", m.m.ScheduledEnqueueTime, fixed.Add(90*time.Second))
	}
	if !bytes.Contains(m.m.Body, []byte(`"attempts":1`)) {
		t.Errorf("retry body = %s, want attempts 1", m.m.Body)
	}
	if v, _ := driverkit.Attempts(m.m.ApplicationProperties[PropAttempts]); v != 1 {
		t.Errorf("retry bq-attempts = %#v", m.m.ApplicationProperties[PropAttempts])
	}
	if calls.Load() != 1 {
		t.Errorf("handler ran %d times before the retry was due", calls.Load())
	}
}

// TestDelayIsScheduled: a delayed publish is not receivable before its time.
func TestDelayIsScheduled(t *testing.T) {
	b := newFakeBroker()
	tr := openFake(t, b)
	m := &transport.Message{Queue: "orders", Body: []byte(orderBody), Delay: time.Hour}
	if err := tr.Publish(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(context.Background(), "orders", transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	transporttest.ExpectNothing(t, c, 200*time.Millisecond)
	got := b.waitingMessages("orders")
	if len(got) != 1 || got[0].m.ScheduledEnqueueTime == nil || time.Until(*got[0].m.ScheduledEnqueueTime) < 59*time.Minute {
		t.Fatalf("delayed message not scheduled an hour ahead: %+v", got)
	}
}

// TestFailedSettleWriteLosesNothing: when the dead-letter queue does not exist the write
// fails, nothing is completed, the delivery is rewound and comes back; once the queue
// exists the message is dead-lettered and completed exactly once. The writes stop at
// the failed one: the write before it stays made, the one after it is never made.
func TestFailedSettleWriteLosesNothing(t *testing.T) {
	b := newFakeBroker()
	b.strict = true
	b.maxDeliveryCount = 1 << 30 // the runtime rewinds fast; keep Service Bus's own DLQ out of this test
	b.declare("orders", "orders.before", "orders.after")
	b.inject("orders", &azservicebus.Message{Body: []byte(orderBody)}, 0)
	tr := openFake(t, b)

	c, err := tr.Consume(context.Background(), "orders", transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := transporttest.Receive(t, c, 5*time.Second)
	err = c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Ack,
		Writes: []*transport.Message{
			{Queue: "orders.before", Body: []byte(`{"first":"write"}`)},
			{Queue: "orders.dlq", Body: []byte(`{"raw":"x"}`)},
			{Queue: "orders.after", Body: []byte(`{"never":"made"}`)},
		}})
	if w, _ := b.counts("orders.before"); w != 1 {
		t.Errorf("orders.before holds %d messages, want the one write made before the failed one", w)
	}
	if w, _ := b.counts("orders.after"); w != 0 {
		t.Errorf("orders.after holds %d messages, want none: writes stop at the first that fails", w)
	}
	var swe *transport.SettleWriteError
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.As(err, &swe) || swe.Queue != "orders.dlq" {
		t.Fatalf("Settle with a write to a missing queue = %v, want a SettleWriteError for orders.dlq", err)
	}
	var sbe *azservicebus.Error
	if !errors.As(err, &sbe) || sbe.Code != azservicebus.CodeNotFound {
		t.Errorf("the SDK's error is not kept: %v", err)
	}
	if _, locked := b.counts("orders"); locked != 1 {
		t.Fatalf("after a failed write the message must stay locked and uncompleted; locked = %d", locked)
	}
	if err := c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatalf("Rewind after a failed write: %v", err)
	}
	d = transporttest.Receive(t, c, 5*time.Second)
	if d.Redeliveries != 1 {
		t.Errorf("Redeliveries after the rewind = %d, want 1", d.Redeliveries)
	}
	if err := c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatal(err)
	}
	_ = c.Close(context.Background())

	// Through the runtime: the handler fails, the DLQ write fails, the message stays.
	a := runApp(t, tr, babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(1))
	var calls atomic.Int32
	a.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		calls.Add(1)
		return errors.New("boom")
	})
	stop := start(t, a)
	eventually(t, "a few failed settlements", func() bool { return calls.Load() >= 3 })
	b.declare("orders.dlq")
	eventually(t, "the dead-letter write", func() bool { w, _ := b.counts("orders.dlq"); return w == 1 })
	stop()
	if w, l := b.counts("orders"); w != 0 || l != 0 {
		t.Errorf("orders holds %d waiting, %d locked after the dead-letter write", w, l)
	}
	if n := len(b.deadLettered("orders")); n != 0 {
		t.Errorf("%d messages hit MaxDeliveryCount", n)
	}
}

// TestLockRenewal: a handler that runs for several lock durations keeps its lock; with
// renewal off the lock is lost and Service Bus redelivers.
func TestLockRenewal(t *testing.T) {
	hold := func(t *testing.T, opts ...Option) (b *fakeBroker, c transport.Consumer, settleErr error) {
		b = newFakeBroker()
		// Renewal at half the remaining lock time leaves 300 ms of slack: enough for a
		// loaded machine running the race detector.
		b.lockDuration = 600 * time.Millisecond
		b.inject("orders", &azservicebus.Message{Body: []byte(orderBody)}, 0)
		tr := openFake(t, b, opts...)
		c, err := tr.Consume(context.Background(), "orders", transport.ConsumeOptions{Prefetch: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		d := transporttest.Receive(t, c, 5*time.Second)
		time.Sleep(2 * time.Second) // more than three lock durations of work
		return b, c, c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Ack})
	}
	t.Run("auto", func(t *testing.T) {
		b, c, err := hold(t)
		if err != nil {
			t.Fatalf("Ack after a long handler: %v", err)
		}
		b.mu.Lock()
		renewals := b.renewals
		b.mu.Unlock()
		if renewals == 0 {
			t.Error("no lock renewal happened")
		}
		transporttest.ExpectNothing(t, c, 300*time.Millisecond)
	})
	t.Run("interval", func(t *testing.T) {
		if _, _, err := hold(t, WithLockRenewal(50*time.Millisecond)); err != nil {
			t.Fatalf("Ack with a fixed renewal interval: %v", err)
		}
	})
	t.Run("off", func(t *testing.T) {
		_, c, err := hold(t, WithLockRenewal(-1))
		var sbe *azservicebus.Error
		if !errors.As(err, &sbe) || sbe.Code != azservicebus.CodeLockLost || !errors.Is(err, transport.ErrTakenBack) {
			t.Fatalf("Ack after the lock expired = %v, want CodeLockLost, taken back", err)
		}
		d := transporttest.Receive(t, c, 5*time.Second)
		if d.Redeliveries != 1 {
			t.Errorf("redelivered with Redeliveries %d, want 1", d.Redeliveries)
		}
		if err := c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Error(err)
		}
	})
	t.Run("max", func(t *testing.T) {
		_, _, err := hold(t, WithMaxLockRenewal(300*time.Millisecond))
		var sbe *azservicebus.Error
		if !errors.As(err, &sbe) || sbe.Code != azservicebus.CodeLockLost {
			t.Fatalf("Ack after renewal stopped = %v, want CodeLockLost", err)
		}
	})
}

// TestLongHandlerThroughRuntime: the runtime's handler outlives several lock durations
// and the message is completed once, not redelivered.
func TestLongHandlerThroughRuntime(t *testing.T) {
	b := newFakeBroker()
	b.lockDuration = 600 * time.Millisecond
	b.inject("orders", &azservicebus.Message{Body: []byte(orderBody)}, 0)
	a := runApp(t, openFake(t, b))
	var calls atomic.Int32
	a.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		calls.Add(1)
		time.Sleep(2 * time.Second)
		return nil
	})
	stop := start(t, a)
	eventually(t, "completion", func() bool { w, l := b.counts("orders"); return w == 0 && l == 0 && calls.Load() == 1 })
	time.Sleep(300 * time.Millisecond)
	stop()
	if calls.Load() != 1 {
		t.Errorf("handler ran %d times", calls.Load())
	}
}

// TestPrefetchBoundsLockedMessages: a consumer never holds more locks than its prefetch.
func TestPrefetchBoundsLockedMessages(t *testing.T) {
	b := newFakeBroker()
	for i := range 6 {
		b.inject("orders", &azservicebus.Message{Body: fmt.Appendf(nil, `{"n":%d}`, i)}, 0)
	}
	tr := openFake(t, b)
	c, err := tr.Consume(context.Background(), "orders", transport.ConsumeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	d1 := transporttest.Receive(t, c, 5*time.Second)
	d2 := transporttest.Receive(t, c, 5*time.Second)
	if _, l := b.counts("orders"); l != 2 {
		t.Errorf("locked = %d with prefetch 2 and two deliveries out", l)
	}
	transporttest.ExpectNothing(t, c, 200*time.Millisecond)
	if _, l := b.counts("orders"); l != 2 {
		t.Errorf("a blocked Receive took more locks: %d", l)
	}
	for _, d := range []*transport.Delivery{d1, d2} {
		if err := c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	d3 := transporttest.Receive(t, c, 5*time.Second)
	if _, l := b.counts("orders"); l > 2 {
		t.Errorf("locked = %d after settling, want at most 2", l)
	}
	_ = c.Settle(context.Background(), d3, transport.Settlement{Outcome: transport.Ack})
}

// TestCloseGivesBackEverything: closing a consumer abandons what it handed out and what
// it had received but not handed out; the transport's Close ends blocked receivers.
func TestCloseGivesBackEverything(t *testing.T) {
	b := newFakeBroker()
	for i := range 4 {
		b.inject("orders", &azservicebus.Message{Body: fmt.Appendf(nil, `{"n":%d}`, i)}, 0)
	}
	tr := openFake(t, b)
	c, err := tr.Consume(context.Background(), "orders", transport.ConsumeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	d := transporttest.Receive(t, c, 5*time.Second) // receives a batch of 4, hands out 1
	if _, l := b.counts("orders"); l != 4 {
		t.Fatalf("locked = %d, want the batch of 4", l)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w, l := b.counts("orders"); w != 4 || l != 0 {
		t.Errorf("after Close: %d waiting, %d locked; want 4 and 0", w, l)
	}
	if err := c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Ack}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Settle after Close = %v, want ErrClosed", err)
	}
	if _, err := c.Receive(context.Background()); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Receive after Close = %v, want ErrClosed", err)
	}

	c2, err := tr.Consume(context.Background(), "empty", transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := c2.Receive(context.Background()); errc <- err }()
	time.Sleep(50 * time.Millisecond)
	if err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("blocked Receive after transport Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a blocked Receive did not return when the transport closed")
	}
	if _, err := tr.Consume(context.Background(), "orders", transport.ConsumeOptions{}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Consume after Close = %v", err)
	}
}

// TestKeysAndHeaders: a key is the PartitionKey (an empty key stays empty), a key
// Service Bus cannot carry is refused, headers are extra string properties that never
// replace a projected one, and only string properties that are not the binding's own
// come back as headers.
func TestKeysAndHeaders(t *testing.T) {
	b := newFakeBroker()
	tr := openFake(t, b)
	ctx := context.Background()
	for _, bad := range [][]byte{{0xff, 0xfe}, bytes.Repeat([]byte("k"), MaxKeyLength+1)} {
		err := tr.Publish(ctx, &transport.Message{Queue: "orders", Body: []byte(orderBody), Key: bad})
		if !errors.Is(err, ErrInvalidKey) {
			t.Errorf("Publish with key %q = %v, want ErrInvalidKey", bad[:2], err)
		}
	}
	m := &transport.Message{Queue: "orders", Body: []byte(orderBody), Key: []byte{},
		Headers:    map[string]string{"traceparent": "00-x-01", PropSourceLang: "evil", PropSchemaVersion: "9"},
		Projection: transport.Projection{Lang: "go", SchemaVersion: 1}}
	if err := tr.Publish(ctx, m); err != nil {
		t.Fatal(err)
	}
	got := b.waitingMessages("orders")[0].m
	if got.PartitionKey == nil || *got.PartitionKey != "" {
		t.Errorf("empty key -> PartitionKey %v, want the empty string", got.PartitionKey)
	}
	if got.ApplicationProperties[PropSourceLang] != "go" || got.ApplicationProperties[PropSchemaVersion] != int32(1) {
		t.Errorf("a header replaced a projected property: %v", got.ApplicationProperties)
	}
	c, err := tr.Consume(ctx, "orders", transport.ConsumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	d := transporttest.Receive(t, c, 5*time.Second)
	if d.Key == nil || len(d.Key) != 0 {
		t.Errorf("empty key came back as %#v", d.Key)
	}
	if len(d.Headers) != 1 || d.Headers["traceparent"] != "00-x-01" {
		t.Errorf("Headers = %v, want only traceparent", d.Headers)
	}

	rm := &azservicebus.ReceivedMessage{Body: []byte("{}"), ApplicationProperties: map[string]any{
		"tenant": "acme", "count": int64(3), "flag": true, PropAttempts: int32(2), PropCreatedAt: int64(5), "nil": nil,
	}}
	d = Reconcile("q", rm)
	if len(d.Headers) != 1 || d.Headers["tenant"] != "acme" {
		t.Errorf("Headers = %v, want only the string property tenant", d.Headers)
	}
}

// TestBrokerDataNeverPanics: whatever the broker hands over becomes a delivery the
// runtime can route (poison at worst).
func TestBrokerDataNeverPanics(t *testing.T) {
	weird := []*azservicebus.ReceivedMessage{
		{},
		{DeliveryCount: ^uint32(0)},
		{RawAMQPMessage: &azservicebus.AMQPAnnotatedMessage{Body: azservicebus.AMQPAnnotatedMessageBody{Value: "text body"}}},
		{RawAMQPMessage: &azservicebus.AMQPAnnotatedMessage{Body: azservicebus.AMQPAnnotatedMessageBody{Value: []byte("bin")}}},
		{RawAMQPMessage: &azservicebus.AMQPAnnotatedMessage{Body: azservicebus.AMQPAnnotatedMessageBody{Value: 42}}},
		{RawAMQPMessage: &azservicebus.AMQPAnnotatedMessage{Body: azservicebus.AMQPAnnotatedMessageBody{Data: [][]byte{[]byte(`{"a"`), []byte(`:1}`)}}}},
		{RawAMQPMessage: &azservicebus.AMQPAnnotatedMessage{Body: azservicebus.AMQPAnnotatedMessageBody{Sequence: [][]any{{1, "x"}}}}},
		{ApplicationProperties: map[string]any{
			PropSchemaVersion: map[string]any{"x": 1}, PropAttempts: "not a number", "h": []byte("x")}},
		{ApplicationProperties: map[string]any{PropSchemaVersion: struct{ A int }{1}, PropAttempts: uint64(1 << 63)}},
		{ApplicationProperties: map[string]any{PropAttempts: int64(-7)}},
	}
	wantBodies := []string{"", "", "text body", "bin", "", `{"a":1}`, "", "", "", ""}
	for i, rm := range weird {
		d := Reconcile("q", rm)
		if d.Body == nil || string(d.Body) != wantBodies[i] {
			t.Errorf("#%d: body %q, want %q (never nil)", i, d.Body, wantBodies[i])
		}
		if d.Redeliveries < 0 {
			t.Errorf("#%d: negative redeliveries", i)
		}
		if ok, _ := settle.GateSchemaVersion(d.SchemaVersion, true); ok && d.SchemaVersion != nil {
			t.Errorf("#%d: odd schema version %#v passes the gate", i, d.SchemaVersion)
		}
		n := settle.ReconcileAttempts(transport.AttemptsMaxNative, 0, false, d)
		if n < 0 {
			t.Errorf("#%d: attempts %d", i, n)
		}
	}
	// bq-attempts is read with driverkit.Attempts, the one coercion of every driver: a
	// number as written, saturating at the int range.
	if d := Reconcile("q", weird[8]); d.AttemptsHeader != math.MaxInt || !d.HasAttemptsHeader {
		t.Errorf("huge bq-attempts = %d/%v, want saturated", d.AttemptsHeader, d.HasAttemptsHeader)
	}
	if d := Reconcile("q", weird[9]); d.AttemptsHeader != -7 || !d.HasAttemptsHeader {
		t.Errorf("negative bq-attempts = %d/%v, want read as written", d.AttemptsHeader, d.HasAttemptsHeader)
	}
	if d := Reconcile("q", weird[7]); d.HasAttemptsHeader {
		t.Errorf("a non-numeric bq-attempts counts as a header")
	}
}
