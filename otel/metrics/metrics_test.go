package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/otel/metrics"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	_ "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

const (
	orderCreated = "urn:babel:orders:created"
	orderRefused = "urn:babel:orders:refused"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// scrape GETs the /metrics handler and parses the exposition.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := scrapeHandler(h)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func scrapeMux(mux *http.ServeMux) map[string]*dto.MetricFamily {
	fams, err := scrapeHandler(mux)
	if err != nil {
		panic(err)
	}
	return fams
}

func scrapeHandler(h http.Handler) (map[string]*dto.MetricFamily, error) {
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(rr.Body)
}

// value adds up the samples of family name whose labels include want (a counter's or
// gauge's value, a histogram's count).
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var n float64
	f, ok := fams[name]
	if !ok {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			n += m.GetCounter().GetValue()
		case m.Gauge != nil:
			n += m.GetGauge().GetValue()
		case m.Histogram != nil:
			n += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return n
}

// newObserver is an Observer exported to a new Prometheus registry, both closed when
// the test ends.
func newObserver(t *testing.T) (*metrics.Prometheus, *metrics.Observer) {
	t.Helper()
	prom, err := metrics.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prom.Shutdown(context.Background()) })
	obs, err := metrics.New(metrics.WithMeterProvider(prom.MeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = obs.Close() })
	return prom, obs
}

// /metrics scraped after a run on Redis holds the counts the test published, handled
// and dead-lettered.
func TestScrapeAfterRedisRun(t *testing.T) {
	began := time.Now()
	url := transporttest.BrokerURL(t, "BQ_REDIS_URL", "redis")
	queue := fmt.Sprintf("otel-metrics-%d", time.Now().UnixNano())
	prom, obs := newObserver(t)
	rec := transporttest.NewRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	app, err := babelqueue.Open(ctx, url, babelqueue.WithQueue(queue), babelqueue.WithDeadLetter(true),
		babelqueue.WithConcurrency(4), babelqueue.WithObserver(obs, rec), babelqueue.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	app.Handle(orderCreated, func(context.Context, *babelqueue.Message) error { return nil })
	app.Handle(orderRefused, func(context.Context, *babelqueue.Message) error {
		return babelqueue.NoRetry(errors.New("order refused"))
	})
	const handled, refused = 17, 5
	for i := range handled + refused {
		urn := orderCreated
		if i < refused {
			urn = orderRefused
		}
		if _, err := app.Publish(ctx, urn, map[string]int{"order_id": i}); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx) }()
	rec.WaitSettled(t, handled+refused, 30*time.Second)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, prom.Handler())
	q := map[string]string{"queue": queue}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"queue": queue}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"babelqueue_published_total", with("outcome", "success"), handled + refused},
		{"babelqueue_published_total", with("urn", orderRefused), refused},
		{"babelqueue_deliveries_received_total", with("lang", "go"), handled + refused},
		{"babelqueue_handler_duration_seconds", with("urn", orderCreated, "outcome", "success"), handled},
		{"babelqueue_handler_duration_seconds", with("urn", orderRefused, "outcome", "no_retry"), refused},
		{"babelqueue_deliveries_settled_total", with("outcome", "ack"), handled},
		{"babelqueue_deliveries_dead_lettered_total", with("urn", orderRefused, "reason", "failed"), refused},
		{"babelqueue_delivery_age_seconds", q, handled + refused},
		{"babelqueue_deliveries_in_flight", q, 0},
		{"babelqueue_deliveries_retried_total", q, -1}, // never retried: no series
	} {
		if got := value(fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Every message was made during the test: its age when its handler started is
	// between zero and the test's time so far.
	for _, m := range fams["babelqueue_delivery_age_seconds"].GetMetric() {
		h := m.GetHistogram()
		if sum, n := h.GetSampleSum(), float64(h.GetSampleCount()); sum < 0 || sum > n*time.Since(began).Seconds() {
			t.Errorf("%v ages add up to %vs", n, sum)
		}
	}
}

// flaky wraps the memory broker: while it fails every Receive fails, as with a broker
// gone away (a Receive waiting when it starts failing returns at once).
type flaky struct {
	*memory.Transport
	failing atomic.Bool
	mu      sync.Mutex
	down    chan struct{} // closed when it starts failing
}

func (f *flaky) fail(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing.Store(on)
	if on {
		close(f.down)
	} else {
		f.down = make(chan struct{})
	}
}

func (f *flaky) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	c, err := f.Transport.Consume(ctx, queue, opts)
	if err != nil {
		return nil, err
	}
	return flakyConsumer{c, f}, nil
}

// QueueStats fails while the broker is away, as a count through a lost connection does.
func (f *flaky) QueueStats(ctx context.Context, queue string) (transport.QueueStats, error) {
	if f.failing.Load() {
		return transport.QueueStats{}, errors.New("connection refused")
	}
	return f.Transport.QueueStats(ctx, queue)
}

type flakyConsumer struct {
	transport.Consumer
	f *flaky
}

func (c flakyConsumer) Receive(ctx context.Context) (*transport.Delivery, error) {
	c.f.mu.Lock()
	down := c.f.down
	c.f.mu.Unlock()
	if c.f.failing.Load() {
		return nil, errors.New("connection refused")
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-down:
			cancel()
		case <-rctx.Done():
		}
	}()
	d, err := c.Consumer.Receive(rctx)
	if err != nil && ctx.Err() == nil && c.f.failing.Load() {
		return nil, errors.New("connection refused")
	}
	return d, err
}

func probe(t *testing.T, h http.Handler) (int, metrics.HealthStatus) {
	t.Helper()
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/", nil))
	var s metrics.HealthStatus
	if err := json.Unmarshal(rr.Body.Bytes(), &s); err != nil {
		t.Fatalf("%s: %v", rr.Body, err)
	}
	return rr.Code, s
}

// Live answers while Run runs; Ready while the consumer receives: not before Run, not
// while the broker is away, again once it is back, not after Run.
func TestHealthHandlers(t *testing.T) {
	broker := &flaky{Transport: memory.New(), down: make(chan struct{})}
	prom, obs := newObserver(t)
	app, err := babelqueue.New(broker, babelqueue.WithQueue("orders"), babelqueue.WithObserver(obs), babelqueue.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	live, ready := metrics.Live(app), metrics.Ready(app, metrics.WithRecoveryWindow(300*time.Millisecond))
	expect := func(what string, wantLive, wantReady int) metrics.HealthStatus {
		t.Helper()
		var s metrics.HealthStatus
		deadline := time.Now().Add(5 * time.Second)
		for {
			var l, r int
			l, _ = probe(t, live)
			r, s = probe(t, ready)
			if l == wantLive && r == wantReady {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: live %d ready %d, want %d and %d (%+v)", what, l, r, wantLive, wantReady, s)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	expect("before Run", http.StatusServiceUnavailable, http.StatusServiceUnavailable)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	if s := expect("running", http.StatusOK, http.StatusOK); s.Status != "ok" || !s.Running || !s.Consuming {
		t.Errorf("running: %+v", s)
	}
	broker.fail(true)
	if s := expect("broker away", http.StatusOK, http.StatusServiceUnavailable); s.LastReceiveErrorAt == nil || s.Status != "unavailable" {
		t.Errorf("broker away: %+v", s)
	}
	broker.fail(false)
	// Ready again once the window passes without a failed receive (the queue is idle),
	// and at once when a delivery arrives.
	expect("broker back, idle", http.StatusOK, http.StatusOK)
	if got := value(scrape(t, prom.Handler()), "babelqueue_receive_errors_total", map[string]string{"queue": "orders"}); got < 1 {
		t.Errorf("%v receive errors counted", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	expect("stopped", http.StatusServiceUnavailable, http.StatusServiceUnavailable)
}
