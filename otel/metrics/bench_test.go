//go:build unix

package metrics_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/otel/metrics"
)

// BenchmarkObserverHooks is what the Observer costs one handled delivery on its own:
// the publish that made it, its receipt, its handler's return and its acknowledgement;
// on an SDK meter provider (the histograms recorded through the SDK) and on a
// Prometheus's (the histograms kept by the Prometheus).
func BenchmarkObserverHooks(b *testing.B) {
	for _, provider := range []string{"sdk", "prometheus"} {
		b.Run(provider, func(b *testing.B) {
			var opt metrics.Option
			if provider == "sdk" {
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer mp.Shutdown(context.Background())
				opt = metrics.WithMeterProvider(mp)
			} else {
				prom, err := metrics.NewPrometheus()
				if err != nil {
					b.Fatal(err)
				}
				defer prom.Shutdown(context.Background())
				opt = metrics.WithMeterProvider(prom.MeterProvider())
			}
			obs, err := metrics.New(opt)
			if err != nil {
				b.Fatal(err)
			}
			defer obs.Close()
			ctx := context.Background()
			d := babelqueue.DeliveryInfo{Queue: "bench", URN: "urn:babel:orders:created", Lang: "python", CreatedAt: time.Now().UnixMilli()}
			published := babelqueue.PublishedEvent{Queue: "bench", URN: "urn:babel:orders:created"}
			handled := babelqueue.HandledEvent{Delivery: d, Start: time.Now(), Duration: time.Millisecond}
			settled := babelqueue.SettledEvent{Delivery: d, Kind: babelqueue.KindHandled, Action: babelqueue.ActionAck}
			b.ReportAllocs()
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			for b.Loop() {
				obs.OnPublished(ctx, published)
				obs.OnReceive(ctx, d)
				obs.OnHandled(ctx, handled)
				obs.OnSettled(ctx, settled)
			}
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := (ru1.Utime.Nano() + ru1.Stime.Nano()) - (ru0.Utime.Nano() + ru0.Stime.Nano())
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
