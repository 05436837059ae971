package otel_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/babelqueue-go/babelqueue"
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
