package otel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

const (
	known   = "urn:babel:orders:created"
	unknown = "urn:babel:orders:unheard-of"
	// poisonBody is JSON without a job or urn; gateBody a valid envelope from PHP.
	poisonBody = `{"trace_id":"t","data":{"order_id":1}}`
	gateBody   = `{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":0}`
	// upstream is a producer span of another service, carried by injected bodies.
	upstream       = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	upstreamSpanID = "00f067aa0ba902b7"
)

// count is one metric increment a row expects: the data points of name whose labels
// include these add up to n.
type count struct {
	name   string
	labels map[string]string
	n      int64
}

func labels(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// TestEveryRowTracedAndCounted drives one delivery per row of docs/settlement.md through
// an app on memory:// with tracing and metrics on, and checks the spans (names, kinds,
// parents, status) and the metric increments each row makes.
func TestEveryRowTracedAndCounted(t *testing.T) {
	var (
		plain = transport.Capabilities{Delay: true, PublishConfirmed: true}
		redis = transport.Capabilities{Delay: true, PublishConfirmed: true, PoisonAlwaysDeadLetter: true}
		sqs   = transport.Capabilities{Delay: true, PublishConfirmed: true, HandOff: true, SchemaGate: true,
			Attempts: transport.AttemptsMaxNative, DeadLetterSuffix: "-dlq"}
		kafka = transport.Capabilities{Delay: true, PublishConfirmed: true, PoisonNeedsRetryTiers: true, SchemaGate: true,
			Attempts: transport.AttemptsHeaderAuthoritative}
		park   = babelqueue.WithRetryTiers(time.Hour)
		dlqOn  = babelqueue.WithDeadLetter(true)
		once   = babelqueue.WithMaxAttempts(1)
		del    = babelqueue.WithUnknownURN(babelqueue.UnknownDelete)
		reject = babelqueue.WithUnknownURN(babelqueue.UnknownDeadLetter)
		relUnk = babelqueue.WithUnknownURN(babelqueue.UnknownRelease)
	)
	type handler int
	const (
		none handler = iota
		ok
		failing
		noRetry
		requeue
	)
	withUpstream := map[string]string{"traceparent": upstream}
	for _, tc := range []struct {
		name    string
		caps    transport.Capabilities
		opts    []babelqueue.Option
		publish string         // publish this URN through the app ...
		inject  *memory.Stored // ... or store this on the queue
		handler handler
		settled string // the observer's "kind/action"
		process codes.Code
		// settle is the settlement span's name ("" for none), its kind, and its parent:
		// "process" (the CONSUMER span), "publish" (the PRODUCER span), "upstream" (the
		// injected traceparent) or "root".
		settle       string
		settleKind   trace.SpanKind
		settleParent string
		counts       []count
	}{
		{name: "handler returns nil: ack", caps: plain, publish: known, handler: ok, settled: "handled/ack", process: codes.Unset,
			counts: []count{{"babelqueue.handler.duration", labels("urn", known, "outcome", "success"), 1},
				{"babelqueue.deliveries.settled", labels("urn", known, "outcome", "ack"), 1},
				{"babelqueue.handler.duration", labels("urn", known, "outcome", "success"), 1},
				{"babelqueue.delivery.age", labels("urn", known), 1}}},
		{name: "handler fails: retry", caps: plain, opts: opts(park), publish: known, handler: failing, settled: "failed/retry",
			process: codes.Error, settle: "retry " + known, settleKind: trace.SpanKindProducer, settleParent: "process",
			counts: []count{{"babelqueue.deliveries.retried", labels("urn", known), 1},
				{"babelqueue.handler.duration", labels("outcome", "error"), 1}}},
		{name: "handler fails at max, DLQ on: dead-letter failed", caps: plain, opts: opts(once, dlqOn), publish: known, handler: failing,
			settled: "failed/dead_letter", process: codes.Error, settle: "dead_letter " + known, settleKind: trace.SpanKindProducer, settleParent: "process",
			counts: []count{{"babelqueue.deliveries.dead_lettered", labels("urn", known, "reason", "failed"), 1}}},
		{name: "handler fails at max, DLQ off: drop", caps: plain, opts: opts(once), publish: known, handler: failing,
			settled: "failed/drop", process: codes.Error, settle: "drop " + known, settleKind: trace.SpanKindInternal, settleParent: "process",
			counts: []count{{"babelqueue.deliveries.dropped", labels("urn", known, "reason", "failed"), 1}}},
		{name: "no retry, DLQ on: dead-letter failed", caps: plain, opts: opts(dlqOn, park), publish: known, handler: noRetry,
			settled: "unretryable/dead_letter", process: codes.Error, settle: "dead_letter " + known, settleKind: trace.SpanKindProducer, settleParent: "process",
			counts: []count{{"babelqueue.deliveries.dead_lettered", labels("urn", known, "reason", "failed"), 1},
				{"babelqueue.handler.duration", labels("outcome", "no_retry"), 1}}},
		{name: "requeue: released", caps: plain, publish: known, handler: requeue, settled: "requeued/release",
			process: codes.Unset, settle: "release " + known, settleKind: trace.SpanKindProducer, settleParent: "process",
			counts: []count{{"babelqueue.deliveries.settled", labels("outcome", "release"), 1},
				{"babelqueue.handler.duration", labels("outcome", "requeue"), 1}}},
		{name: "unknown URN, dead_letter", caps: plain, opts: opts(reject), publish: unknown, settled: "unknown_urn/dead_letter",
			settle: "dead_letter " + unknown, settleKind: trace.SpanKindProducer, settleParent: "publish",
			counts: []count{{"babelqueue.deliveries.dead_lettered", labels("urn", "unknown", "reason", "unknown_urn"), 1},
				{"babelqueue.deliveries.settled", labels("urn", "unknown"), 1},
				{"babelqueue.delivery.age", labels("urn", "unknown"), 1}}},
		{name: "unknown URN, release", caps: plain, opts: opts(relUnk), publish: unknown, settled: "unknown_urn/release",
			settle: "release " + unknown, settleKind: trace.SpanKindProducer, settleParent: "publish",
			counts: []count{{"babelqueue.deliveries.settled", labels("urn", "unknown", "outcome", "release"), 1}}},
		{name: "unknown URN, delete", caps: plain, opts: opts(del, dlqOn), publish: unknown, settled: "unknown_urn/drop",
			settle: "drop " + unknown, settleKind: trace.SpanKindInternal, settleParent: "publish",
			counts: []count{{"babelqueue.deliveries.dropped", labels("urn", "unknown", "reason", "unknown_urn"), 1}}},
		{name: "unknown URN, fail: retried", caps: plain, opts: opts(park, dlqOn), publish: unknown, settled: "unknown_urn/retry",
			settle: "retry " + unknown, settleKind: trace.SpanKindProducer, settleParent: "publish",
			counts: []count{{"babelqueue.deliveries.retried", labels("urn", "unknown"), 1}}},
		{name: "poison, DLQ on: dead-letter poison", caps: plain, opts: opts(dlqOn), inject: &memory.Stored{Body: []byte(poisonBody), Headers: withUpstream},
			settled: "poison/poison_dead_letter", settle: "poison_dead_letter orders", settleKind: trace.SpanKindProducer, settleParent: "upstream",
			counts: []count{{"babelqueue.deliveries.poison", labels("queue", "orders"), 1},
				{"babelqueue.deliveries.dead_lettered", labels("urn", "none", "lang", "none", "reason", "poison"), 1}}},
		{name: "poison, DLQ off: bounded re-publish", caps: plain, opts: opts(park), inject: &memory.Stored{Body: []byte(poisonBody)},
			settled: "poison/poison_retry", settle: "poison_retry orders", settleKind: trace.SpanKindProducer, settleParent: "root",
			counts: []count{{"babelqueue.deliveries.retried", labels("urn", "none"), 1}, {"babelqueue.deliveries.poison", nil, 1}}},
		{name: "poison, delete: drop", caps: plain, opts: opts(del, dlqOn), inject: &memory.Stored{Body: []byte(poisonBody)},
			settled: "poison/drop", settle: "drop orders", settleKind: trace.SpanKindInternal, settleParent: "root",
			counts: []count{{"babelqueue.deliveries.dropped", labels("urn", "none", "reason", "poison"), 1}}},
		{name: "redis: poison, DLQ off: dead-lettered anyway", caps: redis, inject: &memory.Stored{Body: []byte(poisonBody)},
			settled: "poison/poison_dead_letter", settle: "poison_dead_letter orders", settleKind: trace.SpanKindProducer, settleParent: "root",
			counts: []count{{"babelqueue.deliveries.dead_lettered", labels("reason", "poison"), 1}}},
		{name: "sqs: poison, DLQ off: handed to the broker", caps: sqs, inject: &memory.Stored{Body: []byte(poisonBody)},
			settled: "poison/handoff", settle: "handoff orders", settleKind: trace.SpanKindInternal, settleParent: "root",
			counts: []count{{"babelqueue.deliveries.settled", labels("outcome", "handoff"), 1}}},
		{name: "kafka: poison, no tiers: dropped", caps: kafka, inject: &memory.Stored{Body: []byte(poisonBody)},
			settled: "poison/drop", settle: "drop orders", settleKind: trace.SpanKindInternal, settleParent: "root",
			counts: []count{{"babelqueue.deliveries.dropped", labels("reason", "poison"), 1}}},
		{name: "gate, DLQ on: raw body to the DLQ", caps: kafka, opts: opts(dlqOn), handler: ok,
			inject:  &memory.Stored{Body: []byte(gateBody), SchemaVersion: "2", Headers: withUpstream},
			settled: "schema_rejected/raw_dead_letter", settle: "raw_dead_letter orders", settleKind: trace.SpanKindProducer, settleParent: "upstream",
			counts: []count{{"babelqueue.deliveries.gate_rejected", labels("queue", "orders"), 1},
				{"babelqueue.deliveries.dead_lettered", labels("urn", "none", "reason", "schema_rejected"), 1}}},
		{name: "gate, delete: drop", caps: kafka, opts: opts(del, dlqOn), handler: ok, inject: &memory.Stored{Body: []byte(gateBody), SchemaVersion: "x"},
			settled: "schema_rejected/drop", settle: "drop orders", settleKind: trace.SpanKindInternal, settleParent: "root",
			counts: []count{{"babelqueue.deliveries.dropped", labels("reason", "schema_rejected"), 1}}},
		{name: "sqs: gate, DLQ off: handed to the broker", caps: sqs, handler: ok, inject: &memory.Stored{Body: []byte(gateBody), SchemaVersion: "2"},
			settled: "schema_rejected/handoff", settle: "handoff orders", settleKind: trace.SpanKindInternal, settleParent: "root",
			counts: []count{{"babelqueue.deliveries.gate_rejected", nil, 1}}},
		{name: "gate passes \"1\": handled", caps: kafka, handler: ok, inject: &memory.Stored{Body: []byte(gateBody), SchemaVersion: "1", Headers: withUpstream},
			settled: "handled/ack", process: codes.Unset,
			counts: []count{{"babelqueue.deliveries.received", labels("lang", "php"), 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broker := memory.New(memory.WithCapabilities(tc.caps))
			r := newRig(t, broker, true, tc.opts...)
			switch tc.handler {
			case ok:
				r.app.Handle(known, func(context.Context, *babelqueue.Message) error { return nil })
			case failing:
				r.app.Handle(known, func(context.Context, *babelqueue.Message) error { return errors.New("payment gateway timeout") })
			case noRetry:
				r.app.Handle(known, func(context.Context, *babelqueue.Message) error {
					return babelqueue.NoRetry(errors.New("order has no lines"))
				})
			case requeue:
				r.app.Handle(known, func(context.Context, *babelqueue.Message) error {
					return babelqueue.Requeue(time.Hour, errors.New("claimed elsewhere"))
				})
			}
			if tc.publish != "" {
				if _, err := r.app.Publish(context.Background(), tc.publish, map[string]int{"order_id": 1042}); err != nil {
					t.Fatal(err)
				}
			} else {
				broker.Inject("orders", *tc.inject)
			}
			r.run()
			ev := r.rec.WaitSettled(t, 1, 10*time.Second)[0]
			r.stop()
			if got := string(ev.Kind) + "/" + string(ev.Action); got != tc.settled {
				t.Fatalf("settled %s, want %s", got, tc.settled)
			}
			spans := r.spans.GetSpans()
			want := 0
			var publish, process trace.SpanContext
			if tc.publish != "" {
				want++
				p := r.span("publish " + tc.publish)
				if p.SpanKind != trace.SpanKindProducer || attr(p, "messaging.destination.name") != "orders" {
					t.Errorf("publish span: kind %v, destination %q", p.SpanKind, attr(p, "messaging.destination.name"))
				}
				publish = p.SpanContext
			}
			switch ev.Kind {
			case babelqueue.KindHandled, babelqueue.KindFailed, babelqueue.KindUnretryable, babelqueue.KindRequeued:
				want++
				c := r.span("process " + known)
				if c.SpanKind != trace.SpanKindConsumer || c.Status.Code != tc.process {
					t.Errorf("process span: kind %v, status %v, want consumer, %v", c.SpanKind, c.Status.Code, tc.process)
				}
				wantParent := publish.SpanID().String()
				if tc.inject != nil {
					wantParent = upstreamSpanID
				}
				if got := parentOf(c).String(); got != wantParent {
					t.Errorf("process span's parent is %s, want %s", got, wantParent)
				}
				process = c.SpanContext
			}
			if tc.settle != "" {
				want++
				s := r.span(tc.settle)
				if s.SpanKind != tc.settleKind {
					t.Errorf("%s span is %v, want %v", tc.settle, s.SpanKind, tc.settleKind)
				}
				if got := attr(s, "messaging.babelqueue.settle.action"); got != string(ev.Action) {
					t.Errorf("%s span's action attribute is %q", tc.settle, got)
				}
				var wantParent trace.SpanID
				switch tc.settleParent {
				case "process":
					wantParent = process.SpanID()
				case "publish":
					wantParent = publish.SpanID()
				case "upstream":
					wantParent, _ = trace.SpanIDFromHex(upstreamSpanID)
				}
				if got := parentOf(s); got != wantParent {
					t.Errorf("%s span's parent is %s, want %s (%s)", tc.settle, got, wantParent, tc.settleParent)
				}
				if tc.settleParent != "process" && ev.Cause != nil && len(s.Events) == 0 {
					t.Errorf("%s span does not record the cause %v", tc.settle, ev.Cause)
				}
			}
			if len(spans) != want {
				t.Errorf("%d spans, want %d: %v", len(spans), want, spanNames(spans))
			}
			rm := r.collect()
			route := known
			switch {
			case tc.inject != nil && (ev.Kind == babelqueue.KindPoison || ev.Kind == babelqueue.KindSchemaRejected):
				route = "none"
			case tc.publish == unknown:
				route = "unknown"
			}
			all := append([]count{
				{"babelqueue.deliveries.received", labels("queue", "orders"), 1},
				{"babelqueue.deliveries.settled", labels("queue", "orders", "urn", route, "outcome", string(ev.Action)), 1},
				{"babelqueue.deliveries.in_flight", labels("queue", "orders"), 0},
			}, tc.counts...)
			for _, c := range all {
				if got := sum(rm, c.name, c.labels); got != c.n {
					t.Errorf("%s%v = %d, want %d", c.name, c.labels, got, c.n)
				}
			}
			if n := r.tracing.Pending(); n != 0 {
				t.Errorf("%d CONSUMER spans still kept after the settlement", n)
			}
			// A settle write carries the delivery's headers: the next attempt, a release
			// and a redriven dead letter stay children of the producer's span.
			if len(ev.Writes) == 1 && tc.publish != "" {
				w := broker.Messages(ev.Writes[0].Queue)
				if len(w) == 0 {
					w = broker.HandedOff(ev.Writes[0].Queue)
				}
				if len(w) == 0 || !strings.Contains(w[len(w)-1].Headers["traceparent"], publish.SpanID().String()) {
					t.Errorf("the write to %s does not carry the producer's traceparent: %v", ev.Writes[0].Queue, w)
				}
			}
			if got := sum(rm, "babelqueue.deliveries.received", nil); got != 1 {
				t.Errorf("%d deliveries received in all, want 1", got)
			}
		})
	}
}

func opts(o ...babelqueue.Option) []babelqueue.Option { return o }
