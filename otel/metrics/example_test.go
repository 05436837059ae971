package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	dto "github.com/prometheus/client_model/go"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/otel/metrics"
)

// Count what an app does and serve it to Prometheus on /metrics, with the Kubernetes
// probes beside it.
func ExampleNewPrometheus() {
	ctx := context.Background()
	prom, err := metrics.NewPrometheus()
	if err != nil {
		panic(err)
	}
	defer prom.Shutdown(ctx)
	obs, err := metrics.New(metrics.WithMeterProvider(prom.MeterProvider()))
	if err != nil {
		panic(err)
	}
	app, err := babelqueue.Open(ctx, "memory://", babelqueue.WithQueue("orders"), babelqueue.WithObserver(obs),
		babelqueue.WithLogger(quiet()))
	if err != nil {
		panic(err)
	}
	defer app.Close(ctx)

	mux := http.NewServeMux()
	mux.Handle("/metrics", prom.Handler())
	mux.Handle("/livez", metrics.Live(app))
	mux.Handle("/readyz", metrics.Ready(app))
	// go http.ListenAndServe(":9464", mux)

	// Publishes are counted; the probes answer 503 until Run has opened the consumer.
	if _, err := app.Publish(ctx, "urn:babel:orders:created", map[string]int{"order_id": 1042}); err != nil {
		panic(err)
	}
	fams := scrapeMux(mux)
	fmt.Println("published:", value(fams, "babelqueue_published_total", map[string]string{"outcome": "success"}))
	for _, probe := range []string{"/livez", "/readyz"} {
		rr := httptest.NewRecorder()
		mux.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, probe, nil))
		fmt.Println(probe, rr.Code)
	}
	// Output:
	// published: 1
	// /livez 503
	// /readyz 503
}

// Export the backlog, the dead letters and the age of the oldest message of a queue
// from a process that only publishes to it: the collector counts through the broker,
// every 15 seconds by default, and needs no consumer.
func ExampleNewQueueCollector() {
	ctx := context.Background()
	prom, err := metrics.NewPrometheus()
	if err != nil {
		panic(err)
	}
	defer prom.Shutdown(ctx)
	app, err := babelqueue.Open(ctx, "memory://", babelqueue.WithQueue("orders"), babelqueue.WithLogger(quiet()))
	if err != nil {
		panic(err)
	}
	defer app.Close(ctx)
	queues, err := metrics.NewQueueCollector(app.Transport(), metrics.QueuesOf(app),
		metrics.WithMeterProvider(prom.MeterProvider()))
	if err != nil {
		panic(err)
	}
	defer queues.Close()
	// go queues.Run(ctx) counts every interval; here, one round by hand.
	for i := range 3 {
		if _, err := app.Publish(ctx, "urn:babel:orders:created", map[string]int{"order_id": 1042 + i}); err != nil {
			panic(err)
		}
	}
	queues.Collect(ctx)
	fams := scrapeHandler2(prom)
	fmt.Println("ready:", value(fams, "babelqueue_queue_messages_ready", map[string]string{"queue": "orders"}))
	fmt.Println("dead-lettered:", value(fams, "babelqueue_queue_messages_dead_lettered", map[string]string{"queue": "orders"}))
	// Output:
	// ready: 3
	// dead-lettered: 0
}

func scrapeHandler2(p *metrics.Prometheus) map[string]*dto.MetricFamily {
	fams, err := scrapeHandler(p.Handler())
	if err != nil {
		panic(err)
	}
	return fams
}
