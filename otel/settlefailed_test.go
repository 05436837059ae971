package otel_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/babelqueue-go/babelqueue"
	bqotel "github.com/babelqueue-go/babelqueue/otel"
	"github.com/babelqueue-go/babelqueue/otel/metrics"
)

// A settlement whose pipelined writes failed after it was counted is counted in
// settle_failures_total with outcome "pipelined", its urn bounded like every other
// (a URN without a handler is "unknown").
func TestPipelinedSettleFailureCounted(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	obs, err := metrics.New(metrics.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	fail := errors.New("write refused")
	var _ babelqueue.SettleFailedHook = obs
	obs.OnSettleFailed(context.Background(), babelqueue.SettleFailedEvent{
		Delivery: babelqueue.DeliveryInfo{Queue: "orders", URN: known, Lang: "python"}, Kind: babelqueue.KindHandled,
		Writes: []babelqueue.Write{{Queue: "orders"}}, Err: fail,
	})
	obs.OnSettleFailed(context.Background(), babelqueue.SettleFailedEvent{
		Delivery: babelqueue.DeliveryInfo{Queue: "orders", URN: "urn:babel:junk:x"}, Kind: babelqueue.KindUnknownURN,
		Writes: []babelqueue.Write{{Queue: "orders.dlq"}}, Err: fail,
	})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, c := range []count{
		{"babelqueue.settle.failures", labels("queue", "orders", "urn", known, "lang", "python", "outcome", metrics.OutcomePipelined), 1},
		{"babelqueue.settle.failures", labels("queue", "orders", "urn", metrics.URNUnknown, "lang", metrics.None, "outcome", metrics.OutcomePipelined), 1},
		{"babelqueue.settle.failures", labels("urn", "urn:babel:junk:x"), 0},
	} {
		if got := sum(rm, c.name, c.labels); got != c.n {
			t.Errorf("%s%v = %d, want %d", c.name, c.labels, got, c.n)
		}
	}
}

// A pipelined settlement whose writes failed later gets an error span
// "settle_failed <urn>", a child of the delivery's traceparent.
func TestPipelinedSettleFailureSpan(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	tr := bqotel.NewTracing(bqotel.WithTracerProvider(tp))
	var _ babelqueue.SettleFailedHook = tr
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	tr.OnSettleFailed(context.Background(), babelqueue.SettleFailedEvent{
		Delivery: babelqueue.DeliveryInfo{Queue: "orders", URN: known, TraceID: "t-1", Lang: "python",
			Headers: map[string]string{bqotel.HeaderTraceparent: parent}},
		Kind: babelqueue.KindHandled, Writes: []babelqueue.Write{{Queue: "orders.dlq"}}, Err: errors.New("write refused"),
	})
	got := spans.GetSpans()
	if len(got) != 1 {
		t.Fatalf("%d spans, want 1", len(got))
	}
	s := got[0]
	if s.Name != "settle_failed "+known || s.Status.Code != codes.Error {
		t.Errorf("span %q with status %v, want %q with status Error", s.Name, s.Status.Code, "settle_failed "+known)
	}
	if s.Parent.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || s.Parent.SpanID().String() != "b7ad6b7169203331" {
		t.Errorf("parent %s/%s, want the traceparent's span", s.Parent.TraceID(), s.Parent.SpanID())
	}
	if attr(s, "messaging.destination.name") != "orders.dlq" {
		t.Errorf("destination %q, want orders.dlq", attr(s, "messaging.destination.name"))
	}
}
