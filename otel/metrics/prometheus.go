package metrics

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Prometheus is a meter provider whose metrics Prometheus scrapes from [Prometheus.Handler],
// through the OpenTelemetry Prometheus exporter and a registry of its own.
type Prometheus struct {
	registry *prometheus.Registry
	provider *promProvider
}

// promProvider is the SDK's meter provider of a Prometheus, with the histograms an
// [Observer] made with it records into (see the package doc's Cost).
type promProvider struct {
	*sdkmetric.MeterProvider
	hists *ownHistograms
}

// NewPrometheus returns a meter provider exported to a new Prometheus registry. opts
// tune the exporter (otelprom.WithoutScopeInfo, otelprom.WithNamespace, ...); the
// registerer is always the new registry.
func NewPrometheus(opts ...otelprom.Option) (*Prometheus, error) {
	reg := prometheus.NewRegistry()
	hists := &ownHistograms{start: time.Now()}
	exp, err := otelprom.New(append(opts, otelprom.WithRegisterer(reg), otelprom.WithProducer(hists))...)
	if err != nil {
		return nil, err
	}
	return &Prometheus{registry: reg, provider: &promProvider{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		hists:         hists,
	}}, nil
}

// MeterProvider is the provider to give [WithMeterProvider] (and any other
// instrumentation whose metrics belong on the same page): an SDK meter provider whose
// Observers keep their histograms in the Prometheus itself.
func (p *Prometheus) MeterProvider() metric.MeterProvider { return p.provider }

// Registry is the Prometheus registry the metrics are exported to; more collectors
// (Go runtime, process) can be registered on it.
func (p *Prometheus) Registry() *prometheus.Registry { return p.registry }

// Handler serves the metrics in the Prometheus exposition format: mount it on /metrics.
func (p *Prometheus) Handler() http.Handler {
	return promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{})
}

// Shutdown stops the meter provider.
func (p *Prometheus) Shutdown(ctx context.Context) error { return p.provider.Shutdown(ctx) }
