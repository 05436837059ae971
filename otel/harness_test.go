package otel_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/babelqueue-go/babelqueue"
	bqotel "github.com/babelqueue-go/babelqueue/otel"
	"github.com/babelqueue-go/babelqueue/otel/metrics"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// rig is an app with tracing (spans kept in memory) and metrics (read by hand), and a
// recorder, the last observer, to wait on: once it is told of a settlement the spans and
// metrics of that settlement are recorded.
type rig struct {
	t       *testing.T
	app     *babelqueue.App
	spans   *tracetest.InMemoryExporter
	tp      *sdktrace.TracerProvider
	reader  *sdkmetric.ManualReader
	rec     *transporttest.Recorder
	tracing *bqotel.Tracing
	stop    func()
	// release, closed by stop, lets a worker held after its first settlement go on
	// (see holdAfterSettled).
	release chan struct{}
}

// holder holds every worker in its settlement hook until released, so a row that
// re-publishes at once (a release) is settled exactly once before the app stops.
type holder struct{ release chan struct{} }

func (h holder) OnSettled(context.Context, babelqueue.SettledEvent) { <-h.release }

// newRig makes the app; with hold, every worker waits in its first settlement hook
// until the app stops.
func newRig(t *testing.T, tr transport.Transport, hold bool, opts ...babelqueue.Option) *rig {
	t.Helper()
	r := &rig{t: t, spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader(), rec: transporttest.NewRecorder(),
		release: make(chan struct{})}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	r.tracing = bqotel.NewTracing(bqotel.WithTracerProvider(r.tp))
	obs, err := metrics.New(metrics.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))))
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]babelqueue.Option{
		babelqueue.WithQueue("orders"),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		babelqueue.WithObserver(r.tracing, obs, r.rec),
	}, opts...)
	if hold {
		opts = append(opts, babelqueue.WithObserver(holder{r.release}))
	}
	r.app, err = babelqueue.New(tr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r.tracing.Instrument(r.app)
	return r
}

func (r *rig) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.app.Run(ctx) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			close(r.release)
			if err := <-done; err != nil {
				r.t.Errorf("Run: %v", err)
			}
		})
	}
	r.t.Cleanup(r.stop)
}

// span returns the one ended span named name, failing the test when there is not
// exactly one.
func (r *rig) span(name string) tracetest.SpanStub {
	r.t.Helper()
	var found []tracetest.SpanStub
	for _, s := range r.spans.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		r.t.Fatalf("%d spans named %q, want 1; spans: %v", len(found), name, spanNames(r.spans.GetSpans()))
	}
	return found[0]
}

func spanNames(spans tracetest.SpanStubs) []string {
	var names []string
	for _, s := range spans {
		names = append(names, s.Name+" ("+s.SpanKind.String()+")")
	}
	return names
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// collect reads the metrics.
func (r *rig) collect() metricdata.ResourceMetrics {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	return rm
}

// sum adds up the data points of the metric named name whose attributes include every
// label of want (an int64 sum, or a histogram's count).
func sum(rm metricdata.ResourceMetrics, name string, want map[string]string) int64 {
	var n int64
	match := func(get func(string) (string, bool)) bool {
		for k, v := range want {
			if got, ok := get(k); !ok || got != v {
				return false
			}
		}
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if match(func(k string) (string, bool) { v, ok := p.Attributes.Value(attribute.Key(k)); return v.String(), ok }) {
						n += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if match(func(k string) (string, bool) { v, ok := p.Attributes.Value(attribute.Key(k)); return v.String(), ok }) {
						n += int64(p.Count)
					}
				}
			}
		}
	}
	return n
}

func parentOf(s tracetest.SpanStub) trace.SpanID { return s.Parent.SpanID() }
