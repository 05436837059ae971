//go:build unix

package otel_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	bqotel "github.com/babelqueue-go/babelqueue/otel"
	"github.com/babelqueue-go/babelqueue/otel/metrics"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// backlog bounds the messages published and not yet handled: the publisher waits
// beyond it, as a steady producer would. Without a bound the whole run piles up on the
// memory broker and every garbage collection marks it, which charges anything that
// allocates for the size of the pile rather than for its own work.
const backlog = 256

// BenchmarkObservedRuntime is the root's BenchmarkRuntime (publish + consume + handle +
// ack on memory://) with observability off and on, side by side in one run:
//
//	off                 no observer, no middleware
//	metrics             the metrics Observer on a meter provider with a reader
//	sampled-out         metrics, and tracing with a tracer that samples nothing
//	full                metrics, and tracing with every span sampled and batched to an
//	                    exporter that discards them
//	prom                metrics on a metrics.Prometheus's provider (its own histograms)
//	prom+sampled-out    prom, and tracing with a tracer that samples nothing
//	floor               no OpenTelemetry at all: only what any tracing of SPEC.md §8.4
//	                    must do per message for a sampled-out span (see floorSpan)
//	prom+floor          prom, and the floor
//
// Besides ns/op and msgs/s it reports cpu-ns/msg, the process's CPU time per message.
func BenchmarkObservedRuntime(b *testing.B) {
	variants := []struct {
		name                          string
		metrics, prom, tracing, floor bool
		sampler                       sdktrace.Sampler
	}{
		{name: "off"},
		{name: "metrics", metrics: true},
		{name: "sampled-out", metrics: true, tracing: true, sampler: sdktrace.NeverSample()},
		{name: "full", metrics: true, tracing: true, sampler: sdktrace.AlwaysSample()},
		{name: "prom", metrics: true, prom: true},
		{name: "prom+sampled-out", metrics: true, prom: true, tracing: true, sampler: sdktrace.NeverSample()},
		{name: "floor", floor: true},
		{name: "prom+floor", metrics: true, prom: true, floor: true},
	}
	for _, workers := range []int{1, 8} {
		for _, v := range variants {
			b.Run(fmt.Sprintf("workers=%d/%s", workers, v.name), func(b *testing.B) {
				opts := []babelqueue.Option{babelqueue.WithQueue("bench"), babelqueue.WithConcurrency(workers),
					babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
				var tr *bqotel.Tracing
				if v.metrics {
					var mp metric.MeterProvider
					if v.prom {
						prom, err := metrics.NewPrometheus()
						if err != nil {
							b.Fatal(err)
						}
						defer prom.Shutdown(context.Background())
						mp = prom.MeterProvider()
					} else {
						sdk := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
						defer sdk.Shutdown(context.Background())
						mp = sdk
					}
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
				if v.floor {
					app.Use(floorConsume)
					app.UsePublish(floorPublish)
				}
				var n atomic.Int64
				done := make(chan struct{})
				target := int64(b.N)
				window := make(chan struct{}, backlog)
				app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
					<-window
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
				cpu := transporttest.ProcessCPU()
				for i := range b.N {
					window <- struct{}{}
					if _, err := app.Publish(ctx, "urn:babel:orders:created", map[string]any{"order_id": i, "sku": "A-1"}); err != nil {
						b.Fatal(err)
					}
				}
				<-done
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
				b.ReportMetric(float64(transporttest.ProcessCPU()-cpu)/float64(b.N), "cpu-ns/msg")
				cancel()
				<-errc
			})
		}
	}
}

// BenchmarkSpans is the cost of the two spans of a message on their own: the PRODUCER
// span with its traceparent (a publish outside any span, under the parent derived from
// trace_id) and the CONSUMER span (no traceparent: the derived parent), with a tracer
// that samples nothing and with one that records everything.
func BenchmarkSpans(b *testing.B) {
	env, err := envelope.Make("urn:babel:orders:created", map[string]any{"order_id": 1042, "sku": "A-1"}, envelope.WithQueue("bench"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, s := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"sampled-out", sdktrace.NeverSample()}, {"full", sdktrace.AlwaysSample()}} {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(s.sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		defer tp.Shutdown(ctx)
		tr := bqotel.NewTracing(bqotel.WithTracerProvider(tp))
		b.Run("producer/"+s.name, func(b *testing.B) {
			publish := tr.PublishMiddleware()(func(context.Context, *babelqueue.Outgoing) error { return nil })
			b.ReportAllocs()
			cpu := transporttest.ProcessCPU()
			for b.Loop() {
				if err := publish(ctx, &babelqueue.Outgoing{Envelope: env, Queue: "bench", Headers: map[string]string{}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(transporttest.ProcessCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
		b.Run("consumer/"+s.name, func(b *testing.B) {
			handle := tr.Middleware()(func(context.Context, *babelqueue.Message) error { return nil })
			m := &babelqueue.Message{Envelope: env, Queue: "bench"}
			b.ReportAllocs()
			cpu := transporttest.ProcessCPU()
			for b.Loop() {
				if err := handle(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(transporttest.ProcessCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// floorSpan, floorPublish and floorConsume are the least any tracing of SPEC.md §8.4 can do per message for a span the
// sampler drops, with no OpenTelemetry code at all: the publish draws a span id, takes
// the trace id from the envelope's trace_id (a UUID's 16 bytes) and writes the W3C
// traceparent header (sampled flag off); the consume reads and parses the header and
// puts the parent in the handler's context, as a handler's own publish must continue
// the trace. They are no implementation (no tracestate, no SHA-256 for a non-UUID
// trace_id, no span, no hooks): the benchmark's floor variants say what the header alone
// costs, a bound below every real tracer. A floorSpan is the parsed parent in the
// handler's context.
type floorSpan struct {
	context.Context
	traceID [16]byte
	spanID  [8]byte
}

type floorKey struct{}

func (c *floorSpan) Value(key any) any {
	if key == (floorKey{}) {
		return c
	}
	return c.Context.Value(key)
}

func floorPublish(next babelqueue.PublishFunc) babelqueue.PublishFunc {
	return func(ctx context.Context, o *babelqueue.Outgoing) error {
		var buf [55]byte
		copy(buf[:], "00-00000000000000000000000000000000-")
		if id := o.Envelope.TraceID; len(id) == 36 { // a UUID: its 32 hex digits are the trace id
			copy(buf[3:11], id[0:8])
			copy(buf[11:15], id[9:13])
			copy(buf[15:19], id[14:18])
			copy(buf[19:23], id[19:23])
			copy(buf[23:35], id[24:36])
		}
		var sid [8]byte
		binary.LittleEndian.PutUint64(sid[:], rand.Uint64()|1)
		hex.Encode(buf[36:52], sid[:])
		copy(buf[52:], "-00")
		o.Headers["traceparent"] = string(buf[:])
		return next(ctx, o)
	}
}

func floorConsume(next babelqueue.Handler) babelqueue.Handler {
	return func(ctx context.Context, m *babelqueue.Message) error {
		if tp := m.Header("traceparent"); len(tp) == 55 {
			s := &floorSpan{Context: ctx}
			bad := byte(0)
			for i := range 16 {
				h, l := unhexTable[tp[3+2*i]], unhexTable[tp[4+2*i]]
				s.traceID[i], bad = h<<4|l&0x0f, bad|h|l
			}
			for i := range 8 {
				h, l := unhexTable[tp[36+2*i]], unhexTable[tp[37+2*i]]
				s.spanID[i], bad = h<<4|l&0x0f, bad|h|l
			}
			if bad&0xf0 == 0 {
				ctx = s
			}
		}
		return next(ctx, m)
	}
}

// unhexTable maps a lower-case hex digit to its value and any other byte to 0xff.
var unhexTable = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := byte('0'); c <= '9'; c++ {
		t[c] = c - '0'
	}
	for c := byte('a'); c <= 'f'; c++ {
		t[c] = c - 'a' + 10
	}
	return t
}()
