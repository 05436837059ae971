package metrics_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/protobuf/proto"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/otel/metrics"
)

// feed tells obs of the same deliveries every time: handled ones of several outcomes
// and ages on two routes, an unknown URN (its age recorded at settlement) and values on
// bucket bounds, below the first and above the last.
func feed(obs *metrics.Observer) {
	ctx := context.Background()
	now := time.Now()
	durations := []time.Duration{0, time.Millisecond, 2500 * time.Microsecond, 3 * time.Millisecond, time.Second, 90 * time.Second}
	errs := []error{nil, errors.New("boom"), babelqueue.NoRetry(errors.New("bad")), babelqueue.Requeue(time.Second, errors.New("later")), &babelqueue.PanicError{Value: 1}}
	for i, d := range durations {
		for j, err := range errs {
			info := babelqueue.DeliveryInfo{Queue: "q", URN: orderCreated, Lang: "python", CreatedAt: now.Add(-time.Duration(i*j) * 700 * time.Millisecond).UnixMilli()}
			if j%2 == 1 {
				info.Queue, info.URN = "other", orderRefused
			}
			obs.OnReceive(ctx, info)
			obs.OnHandled(ctx, babelqueue.HandledEvent{Delivery: info, Start: now, Duration: d, Err: err})
			obs.OnSettled(ctx, babelqueue.SettledEvent{Delivery: info, Kind: babelqueue.KindHandled, Action: babelqueue.ActionAck})
		}
	}
	unknown := babelqueue.DeliveryInfo{Queue: "q", URN: "urn:babel:nobody", Lang: "go", CreatedAt: now.Add(-2 * time.Hour).UnixMilli()}
	obs.OnReceive(ctx, unknown)
	obs.OnSettled(ctx, babelqueue.SettledEvent{Delivery: unknown, Kind: babelqueue.KindUnknownURN, Action: babelqueue.ActionDeadLetter, Reason: "unknown_urn"})
}

// histogramFamilies gathers g and keeps the histogram families, without their sums
// (the ages are measured against the clock; the buckets, counts and labels are exact).
func histogramFamilies(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		if f.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range f.GetMetric() {
			m.Histogram.SampleSum = nil
			m.Histogram.CreatedTimestamp = nil
		}
		out[f.GetName()] = f
	}
	return out
}

// A Prometheus's own histograms export what the SDK's do for the same measurements:
// the same families, help, labels, buckets and counts.
func TestOwnHistogramsMatchTheSDK(t *testing.T) {
	prom, own := newObserver(t)

	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	sdk, err := metrics.New(metrics.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sdk.Close() })

	feed(own)
	feed(sdk)
	got, want := histogramFamilies(t, prom.Registry()), histogramFamilies(t, reg)
	if len(want) != 2 {
		t.Fatalf("the SDK exported %d histogram families, want 2", len(want))
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s: missing from the Prometheus's own histograms", name)
			continue
		}
		if !proto.Equal(g, w) {
			t.Errorf("%s differs:\n own %v\n sdk %v", name, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("own histogram families %d, SDK's %d", len(got), len(want))
	}
	// The sum and the text exposition come through too.
	body := scrapeText(t, prom)
	for _, s := range []string{"babelqueue_handler_duration_seconds_sum{", `le="+Inf"} `} {
		if !strings.Contains(body, s) {
			t.Errorf("/metrics has no %s", s)
		}
	}
}

func scrapeText(t *testing.T, prom *metrics.Prometheus) string {
	t.Helper()
	rr := httptest.NewRecorder()
	promhttp.HandlerFor(prom.Registry(), promhttp.HandlerOpts{}).ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rr.Body.String()
}

// Observers recording at once into one Prometheus count every measurement once, in one
// series per label set.
func TestOwnHistogramsConcurrent(t *testing.T) {
	prom, a := newObserver(t)
	b, err := metrics.New(metrics.WithMeterProvider(prom.MeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const per = 2000
	var wg sync.WaitGroup
	for _, obs := range []*metrics.Observer{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info := babelqueue.DeliveryInfo{Queue: "q", URN: orderCreated, CreatedAt: time.Now().UnixMilli()}
			for range per {
				obs.OnHandled(context.Background(), babelqueue.HandledEvent{Delivery: info, Start: time.Now(), Duration: time.Millisecond})
			}
		}()
	}
	done := make(chan struct{})
	go func() { // scrapes while the measurements arrive
		defer close(done)
		for range 20 {
			_, _ = prom.Registry().Gather()
		}
	}()
	wg.Wait()
	<-done
	fams := scrape(t, prom.Handler())
	for _, name := range []string{"babelqueue_handler_duration_seconds", "babelqueue_delivery_age_seconds"} {
		if f := fams[name]; f == nil || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetHistogram().GetSampleCount() != 4*per {
			t.Errorf("%s: %v, want one series of %d", name, f, 4*per)
		}
	}
	if got := value(fams, "babelqueue_handler_duration_seconds", nil); got != 4*per {
		t.Errorf("count %v", got)
	}
}

// A second Observer on one Prometheus cannot ask other buckets.
func TestOwnHistogramsBoundsConflict(t *testing.T) {
	prom, _ := newObserver(t)
	if _, err := metrics.New(metrics.WithMeterProvider(prom.MeterProvider()), metrics.WithDurationBuckets(0.5, 1)); err == nil {
		t.Fatal("no error for other bounds")
	}
	same, err := metrics.New(metrics.WithMeterProvider(prom.MeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	_ = same.Close()
}
