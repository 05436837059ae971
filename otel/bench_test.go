//go:build unix

package otel_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/babelqueue-go/babelqueue"
	bqotel "github.com/babelqueue-go/babelqueue/otel"
	"github.com/babelqueue-go/babelqueue/otel/metrics"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// cpuTime is the CPU time the process used so far (user and system): on a shared
// machine it varies far less with the other load than the wall-clock time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkObservedRuntime is the root's BenchmarkRuntime (publish + consume + handle +
// ack on memory://) with observability off and on, side by side in one run:
//
//	off                 no observer, no middleware
//	metrics             the metrics Observer on a meter provider with a reader
//	sampled-out         metrics, and tracing with a tracer that samples nothing
//	full                metrics, and tracing with every span sampled and batched to an
//	                    exporter that discards them
//
// Besides ns/op and msgs/s it reports cpu-ns/msg, the process's CPU time per message.
func BenchmarkObservedRuntime(b *testing.B) {
	variants := []struct {
		name             string
		metrics, tracing bool
		sampler          sdktrace.Sampler
	}{
		{name: "off"},
		{name: "metrics", metrics: true},
		{name: "sampled-out", metrics: true, tracing: true, sampler: sdktrace.NeverSample()},
		{name: "full", metrics: true, tracing: true, sampler: sdktrace.AlwaysSample()},
	}
	for _, workers := range []int{1, 8} {
		for _, v := range variants {
			b.Run(fmt.Sprintf("workers=%d/%s", workers, v.name), func(b *testing.B) {
				opts := []babelqueue.Option{babelqueue.WithQueue("bench"), babelqueue.WithConcurrency(workers),
					babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
				var tr *bqotel.Tracing
				if v.metrics {
					mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
					defer mp.Shutdown(context.Background())
					obs, err := metrics.New(metrics.WithMeterProvider(mp))
					if err != nil {
						b.Fatal(err)
					}
					opts = append(opts, babelqueue.WithObserver(obs))
				}
				if v.tracing {
					tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(v.sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
					defer tp.Shutdown(context.Background())
					tr = bqotel.NewTracing(bqotel.WithTracerProvider(tp))
					opts = append(opts, babelqueue.WithObserver(tr))
				}
				app, err := babelqueue.New(memory.New(), opts...)
				if err != nil {
					b.Fatal(err)
				}
				if tr != nil {
					tr.Instrument(app)
				}
				var n atomic.Int64
				done := make(chan struct{})
				target := int64(b.N)
				app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
					if n.Add(1) == target {
						close(done)
					}
					return nil
				})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				errc := make(chan error, 1)
				go func() { errc <- app.Run(ctx) }()
				b.ReportAllocs()
				b.ResetTimer()
				cpu := cpuTime()
				for i := range b.N {
					if _, err := app.Publish(ctx, "urn:babel:orders:created", map[string]any{"order_id": i, "sku": "A-1"}); err != nil {
						b.Fatal(err)
					}
				}
				<-done
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/msg")
				cancel()
				<-errc
			})
		}
	}
}
