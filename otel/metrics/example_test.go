package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

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
