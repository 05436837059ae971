package otel_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/babelqueue-go/babelqueue"
	bqotel "github.com/babelqueue-go/babelqueue/otel"
	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

func TestTraceIDOf(t *testing.T) {
	sha := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:16])
	}
	for _, tc := range []struct{ in, want string }{
		{"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b", "7b3f9c2ae41d4f889b2a1c0d5e6f7a8b"},
		{"7B3F9C2AE41D4F889B2A1C0D5E6F7A8B", "7b3f9c2ae41d4f889b2a1c0d5e6f7a8b"},
		{"7b3f-9c2a-e41d-4f88-9b2a-1c0d-5e6f-7a8b", "7b3f9c2ae41d4f889b2a1c0d5e6f7a8b"},
		{"00000000-0000-0000-0000-000000000000", sha("00000000-0000-0000-0000-000000000000")},
		{"order-1042", sha("order-1042")},
		{"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8g", sha("7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8g")},
		{"", sha("")},
	} {
		if got := bqotel.TraceIDOf(tc.in).String(); got != tc.want {
			t.Errorf("TraceIDOf(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	id := bqotel.TraceIDOf("7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b")
	if got := bqotel.UUIDOf(id); got != "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b" {
		t.Errorf("UUIDOf = %s", got)
	}
	p := bqotel.RemoteParent("order-1042")
	sum := sha256.Sum256([]byte("babelqueue-span:order-1042"))
	if p.SpanID().String() != hex.EncodeToString(sum[:8]) || !p.IsRemote() || !p.IsSampled() || p.TraceID() != bqotel.TraceIDOf("order-1042") {
		t.Errorf("RemoteParent = %+v", p)
	}
}

// runOne publishes nothing: it runs the app until n settlements, then stops it.
func (r *rig) runUntil(n int) []babelqueue.SettledEvent {
	r.t.Helper()
	r.run()
	ev := r.rec.WaitSettled(r.t, n, 10*time.Second)
	r.stop()
	return ev
}

// Without a traceparent the CONSUMER span is in the trace of trace_id, under the parent
// every SDK of the family derives; a malformed one is ignored the same way.
func TestConsumerWithoutTraceparent(t *testing.T) {
	for name, headers := range map[string]map[string]string{
		"none":      nil,
		"malformed": {"traceparent": "00-not-a-trace-01"},
		"zero":      {"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"},
	} {
		t.Run(name, func(t *testing.T) {
			broker := memory.New()
			r := newRig(t, broker, false)
			r.app.Handle(known, func(context.Context, *babelqueue.Message) error { return nil })
			broker.Inject("orders", memory.Stored{Body: []byte(gateBody), Headers: headers})
			r.runUntil(1)
			c := r.span("process " + known)
			want := bqotel.RemoteParent("7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b")
			if c.SpanContext.TraceID().String() != "7b3f9c2ae41d4f889b2a1c0d5e6f7a8b" || c.Parent.SpanID() != want.SpanID() || !c.Parent.IsRemote() {
				t.Errorf("process span in trace %s under %s, want trace 7b3f9c2a… under %s", c.SpanContext.TraceID(), c.Parent.SpanID(), want.SpanID())
			}
			if got := attr(c, "messaging.babelqueue.lang"); got != "php" {
				t.Errorf("lang attribute %q, want php", got)
			}
			if got := attr(c, "messaging.message.id"); got != "f1e2d3c4-b5a6-4789-90ab-cdef01234567" {
				t.Errorf("message id attribute %q", got)
			}
		})
	}
}

// A handler's Publish with its context makes a PRODUCER span under its CONSUMER span,
// keeps the trace_id, and the next consumer is that PRODUCER span's child.
func TestHandlerPublishContinuesTrace(t *testing.T) {
	broker := memory.New()
	r := newRig(t, broker, false)
	const next = "urn:babel:orders:invoiced"
	r.app.Handle(known, func(ctx context.Context, m *babelqueue.Message) error {
		_, err := r.app.Publish(ctx, next, map[string]int{"order_id": 1042})
		return err
	})
	var traceIDs [2]string
	r.app.Handle(next, func(_ context.Context, m *babelqueue.Message) error {
		traceIDs[1] = m.TraceID()
		return nil
	})
	id, err := r.app.Publish(context.Background(), known, map[string]int{"order_id": 1042})
	if err != nil {
		t.Fatal(err)
	}
	_ = id
	r.runUntil(2)
	pub1, proc1 := r.span("publish "+known), r.span("process "+known)
	pub2, proc2 := r.span("publish "+next), r.span("process "+next)
	if parentOf(proc1) != pub1.SpanContext.SpanID() || parentOf(pub2) != proc1.SpanContext.SpanID() || parentOf(proc2) != pub2.SpanContext.SpanID() {
		t.Errorf("chain broken: publish %s → process (parent %s) %s → publish (parent %s) %s → process (parent %s)",
			pub1.SpanContext.SpanID(), parentOf(proc1), proc1.SpanContext.SpanID(), parentOf(pub2), pub2.SpanContext.SpanID(), parentOf(proc2))
	}
	for _, s := range []tracetest.SpanStub{proc1, pub2, proc2} {
		if s.SpanContext.TraceID() != pub1.SpanContext.TraceID() {
			t.Errorf("%s is in trace %s, not %s", s.Name, s.SpanContext.TraceID(), pub1.SpanContext.TraceID())
		}
	}
	// Published outside any span, the first PRODUCER span is in the trace of its trace_id.
	if got := bqotel.UUIDOf(pub1.SpanContext.TraceID()); got != traceIDs[1] {
		t.Errorf("trace %s, envelope trace_id %s", got, traceIDs[1])
	}
	if got := attr(pub1, "messaging.message.body.size"); got == "" || got == "0" {
		t.Errorf("publish span's body size is %q", got)
	}
}

// The outbox stores what App.Prepare returns (the publish middleware ran: a PRODUCER
// span and its traceparent) and its relay publishes it later: the consumer is the child
// of that PRODUCER span.
func TestOutboxRelayKeepsTraceparent(t *testing.T) {
	broker := memory.New()
	r := newRig(t, broker, false)
	r.app.Handle(known, func(context.Context, *babelqueue.Message) error { return nil })
	store := outbox.NewMemoryStore()
	if _, err := outbox.NewWriter(r.app, store).Write(context.Background(), nil, known, map[string]int{"order_id": 1042}); err != nil {
		t.Fatal(err)
	}
	pub := r.span("publish " + known)
	if got := len(broker.Messages("orders")); got != 0 {
		t.Fatalf("%d messages on the queue before the relay ran", got)
	}
	if _, err := outbox.NewRelay(store, broker).Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.runUntil(1)
	if got := parentOf(r.span("process " + known)); got != pub.SpanContext.SpanID() {
		t.Errorf("the relayed message's consumer is under %s, want the outbox write's PRODUCER span %s", got, pub.SpanContext.SpanID())
	}
}

// A retry write the broker refuses fails the settlement: the retry span has status
// Error, the metrics count a settle failure and a rewind, and the redelivery retries.
func TestSettleWriteFailure(t *testing.T) {
	broker := memory.New()
	r := newRig(t, broker, false, babelqueue.WithRetryTiers(time.Hour))
	r.app.Handle(known, func(context.Context, *babelqueue.Message) error { return errors.New("no") })
	if _, err := r.app.Publish(context.Background(), known, map[string]int{"order_id": 1042}); err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int32
	broker.FailWrites(func(*transport.Message) error {
		if writes.Add(1) == 1 {
			return errors.New("broker said no")
		}
		return nil
	})
	evs := r.runUntil(2)
	if evs[0].Err == nil || evs[1].Err != nil || evs[1].Action != babelqueue.ActionRetry {
		t.Fatalf("settlements: %v / %v", evs[0], evs[1])
	}
	var failed, ok int
	for _, s := range r.spans.GetSpans() {
		if s.Name == "retry "+known {
			if s.Status.Code == codes.Error {
				failed++
			} else {
				ok++
			}
		}
	}
	if failed != 1 || ok != 1 {
		t.Errorf("retry spans: %d failed, %d confirmed; want 1 and 1", failed, ok)
	}
	rm := r.collect()
	for _, c := range []count{
		{"babelqueue.settle.failures", labels("urn", known, "outcome", "retry"), 1},
		{"babelqueue.deliveries.rewound", labels("urn", known), 1},
		{"babelqueue.deliveries.retried", labels("urn", known), 1},
		{"babelqueue.deliveries.received", labels("queue", "orders"), 2},
	} {
		if got := sum(rm, c.name, c.labels); got != c.n {
			t.Errorf("%s%v = %d, want %d", c.name, c.labels, got, c.n)
		}
	}
}

// A handler still running after the shutdown grace is given back to the broker: a
// rewind span under its CONSUMER span, and a rewind counted.
func TestAbandonedHandlerRewound(t *testing.T) {
	broker := memory.New()
	r := newRig(t, broker, false, babelqueue.WithShutdownGrace(50*time.Millisecond))
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	r.app.Handle(known, func(context.Context, *babelqueue.Message) error {
		close(started)
		<-release
		return nil
	})
	if _, err := r.app.Publish(context.Background(), known, map[string]int{"order_id": 1042}); err != nil {
		t.Fatal(err)
	}
	r.run()
	<-started
	r.stop()
	ev := r.rec.WaitSettled(t, 1, 10*time.Second)[0]
	if ev.Action != babelqueue.ActionRewind {
		t.Fatalf("settled %s", ev.Action)
	}
	rewind := r.span("rewind " + known)
	if rewind.SpanKind != trace.SpanKindInternal {
		t.Errorf("rewind span is %v", rewind.SpanKind)
	}
	rm := r.collect()
	if got := sum(rm, "babelqueue.deliveries.rewound", labels("queue", "orders", "urn", known)); got != 1 {
		t.Errorf("%d rewinds counted", got)
	}
	if got := sum(rm, "babelqueue.deliveries.in_flight", labels("queue", "orders")); got != 0 {
		t.Errorf("%d deliveries still in flight", got)
	}
	release <- struct{}{}
	// The CONSUMER span ends when the handler returns, after the rewind; it is the rewind
	// span's parent.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && len(r.spans.GetSpans()) < 3 {
		time.Sleep(5 * time.Millisecond)
	}
	if got := parentOf(rewind); got != r.span("process "+known).SpanContext.SpanID() {
		t.Errorf("rewind span is under %s, not the process span", got)
	}
}

// A publish the broker refuses has a PRODUCER span with status Error and is counted.
func TestPublishFailure(t *testing.T) {
	broker := memory.New()
	r := newRig(t, broker, false)
	broker.FailWrites(func(*transport.Message) error { return errors.New("broker said no") })
	if _, err := r.app.Publish(context.Background(), known, map[string]int{"order_id": 1042}); err == nil {
		t.Fatal("publish succeeded")
	}
	if s := r.span("publish " + known); s.Status.Code != codes.Error {
		t.Errorf("publish span status %v", s.Status.Code)
	}
	rm := r.collect()
	if got := sum(rm, "babelqueue.published", labels("urn", known, "outcome", "error")); got != 1 {
		t.Errorf("%d failed publishes counted", got)
	}
}

// With a tracer that samples nothing no span is recorded and none is kept for the
// settlement, but the traceparent still travels (sampled flag off), so a downstream
// service that samples by parent stays consistent.
func TestSampledOut(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := bqotel.NewTracing(bqotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithSampler(sdktrace.NeverSample()))))
	broker := memory.New()
	app, err := babelqueue.New(broker, babelqueue.WithQueue("orders"), babelqueue.WithObserver(tr))
	if err != nil {
		t.Fatal(err)
	}
	tr.Instrument(app)
	if _, err := app.Publish(context.Background(), known, map[string]int{"order_id": 1042}); err != nil {
		t.Fatal(err)
	}
	m := broker.Messages("orders")
	if tp := m[0].Headers["traceparent"]; len(tp) != 55 || !strings.HasSuffix(tp, "-00") {
		t.Errorf("traceparent %q, want an unsampled one", tp)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("%d spans recorded", n)
	}
}

// The PRODUCER span's context is written without the propagator when it is W3C Trace
// Context: the headers are the ones its Inject writes, byte for byte.
func TestInjectW3CAsPropagator(t *testing.T) {
	tid := bqotel.TraceIDOf("7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b")
	sid := trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	ts, err := trace.ParseTraceState("vendor=abc,other=x-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []trace.SpanContextConfig{
		{TraceID: tid, SpanID: sid},
		{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled},
		{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled | trace.FlagsRandom},
		{TraceID: tid, SpanID: sid, TraceFlags: 0xff, Remote: true},
		{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts},
		{TraceID: tid},
		{SpanID: sid},
		{},
	} {
		sc := trace.NewSpanContext(cfg)
		want := map[string]string{}
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.MapCarrier(want))
		got := map[string]string{}
		bqotel.InjectW3C(sc, got)
		if !maps.Equal(got, want) {
			t.Errorf("%+v: wrote %q, the propagator %q", cfg, got, want)
		}
	}
}

// traceIDOfReference is TraceIDOf as SPEC §8.4 words it, through the standard library.
func traceIDOfReference(s string) trace.TraceID {
	var id trace.TraceID
	if b, err := hex.DecodeString(strings.ReplaceAll(s, "-", "")); err == nil && len(b) == len(id) {
		copy(id[:], b)
		if id.IsValid() {
			return id
		}
	}
	sum := sha256.Sum256([]byte(s))
	copy(id[:], sum[:16])
	if !id.IsValid() {
		id[15] = 1
	}
	return id
}

// TraceIDOf reads a UUID as the reference does, whatever byte is put anywhere in it.
func TestTraceIDOfEveryByte(t *testing.T) {
	const uuid = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8B"
	for i := 0; i <= len(uuid); i++ {
		for c := range 256 {
			for _, s := range []string{uuid[:i] + string(rune(c)) + uuid[i:], uuid[:i] + string([]byte{byte(c)}) + uuid[min(i+1, len(uuid)):]} {
				if got, want := bqotel.TraceIDOf(s), traceIDOfReference(s); got != want {
					t.Fatalf("TraceIDOf(%q) = %s, want %s", s, got, want)
				}
			}
		}
	}
}

func FuzzTraceIDOf(f *testing.F) {
	for _, s := range []string{"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b", "7B3F9C2AE41D4F889B2A1C0D5E6F7A8B", "order-1042", "", "--", "0000000000000000000000000000000g"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := bqotel.TraceIDOf(s), traceIDOfReference(s); got != want {
			t.Fatalf("TraceIDOf(%q) = %s, want %s", s, got, want)
		}
	})
}
