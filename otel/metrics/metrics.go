// Package metrics counts what a BabelQueue app does as OpenTelemetry metrics, with
// labels a polyglot fleet can read: the queue, the URN, the producing language
// (meta.lang) and the outcome. An [Observer] is told of every delivery, settlement,
// publish and receive error through the runtime's hooks; [NewPrometheus] exports the
// metrics for Prometheus and serves /metrics; [Live] and [Ready] answer Kubernetes
// probes. docs/grafana-dashboard.json is a dashboard of these metrics.
//
// # Metrics
//
// With the Prometheus exporter, names get the unit and _total suffixes shown here.
//
//	babelqueue_deliveries_received_total{queue,urn,lang}         deliveries received (counted once settled)
//	babelqueue_deliveries_handled_total{queue,urn,lang,outcome}  handler returns: success, error, no_retry, requeue, panic, timeout
//	babelqueue_deliveries_settled_total{queue,urn,lang,outcome}  confirmed settlements, outcome = the action (ack, retry, dead_letter, ...)
//	babelqueue_deliveries_retried_total{queue,urn,lang}          re-published with attempts+1 (poison: the bounded re-publish)
//	babelqueue_deliveries_dead_lettered_total{queue,urn,lang,reason}  reason: failed, unknown_urn, poison, schema_rejected, raw
//	babelqueue_deliveries_dropped_total{queue,urn,lang,reason}   acknowledged without a write; reason: the delivery's kind
//	babelqueue_deliveries_poison_total{queue}                    bodies that are not usable envelopes
//	babelqueue_deliveries_gate_rejected_total{queue}             schema-version gate rejections
//	babelqueue_deliveries_rewound_total{queue,urn,lang}          given back to the broker to redeliver
//	babelqueue_settle_failures_total{queue,urn,lang,outcome}     settlements the broker did not confirm (then rewound)
//	babelqueue_deliveries_in_flight{queue}                       received and not yet settled
//	babelqueue_handler_duration_seconds{queue,urn,lang,outcome}  histogram
//	babelqueue_delivery_age_seconds{queue,urn,lang}              histogram: now − meta.created_at when the delivery is received
//	babelqueue_published_total{queue,urn,outcome}                App.Publish calls: success or error
//	babelqueue_receive_errors_total{queue}                       failed receives (the broker went away)
//
// # Cardinality
//
// Every label has a bounded set of values. queue is a queue the app consumes or
// publishes to. urn is a URN the app has a handler for; every other URN shares the value
// "unknown", and a delivery with no URN (poison, a schema-version rejection) has
// "none": a flood of junk URNs adds no series. lang is one of the family's languages
// (php, go, python, java, dotnet, node), "other" for any other value and "none" when
// missing. outcome and reason take the few values listed above. A delivery's counters
// are recorded when it is settled, once its kind is known, so all of them carry the same
// labels; in_flight counts those received and not settled yet. A publish's urn is the
// one the code published, bounded by the code.
package metrics

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
)

// ScopeName is the instrumentation scope of the metrics.
const ScopeName = "github.com/babelqueue-go/babelqueue/otel/metrics"

// Label values shared by deliveries whose URN or language is not one of a bounded set.
const (
	// URNUnknown is the urn of a delivery no handler matches.
	URNUnknown = "unknown"
	// None is the urn of a delivery without a URN (poison, a schema-version rejection)
	// and the lang of one without meta.lang.
	None = "none"
	// LangOther is the lang of a producing language outside the family.
	LangOther = "other"
)

// The outcomes of a handler call (the outcome label of handled and handler_duration).
const (
	OutcomeSuccess = "success"
	OutcomeError   = "error"
	OutcomeNoRetry = "no_retry"
	OutcomeRequeue = "requeue"
	OutcomePanic   = "panic"
	OutcomeTimeout = "timeout"
)

// Option configures [New].
type Option func(*config)

type config struct {
	mp         metric.MeterProvider
	durationSB []float64
	ageSB      []float64
}

// WithMeterProvider sets the meter provider (default: the global one,
// otel.GetMeterProvider). [Prometheus.MeterProvider] exports to Prometheus.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	}
}

// WithDurationBuckets sets the bucket bounds, in seconds, of the handler duration
// histogram (default 1 ms to 60 s).
func WithDurationBuckets(bounds ...float64) Option {
	return func(c *config) { c.durationSB = append([]float64(nil), bounds...) }
}

// WithAgeBuckets sets the bucket bounds, in seconds, of the delivery age histogram
// (default 5 ms to one day).
func WithAgeBuckets(bounds ...float64) Option {
	return func(c *config) { c.ageSB = append([]float64(nil), bounds...) }
}

// Observer records the metrics of the apps it is given to ([babelqueue.WithObserver]).
// Its methods are the runtime's hooks; they are safe for concurrent use and fast.
type Observer struct {
	received, handled, settled, retried, deadLettered, dropped metric.Int64Counter
	poison, rejected, rewound, settleFailures                  metric.Int64Counter
	published, receiveErrors                                   metric.Int64Counter
	duration, age                                              metric.Float64Histogram
	inFlight                                                   metric.Int64ObservableUpDownCounter
	registration                                               metric.Registration

	labels sync.Map // labelKey → metric.MeasurementOption
	queues sync.Map // queue → *atomic.Int64 (in flight)
}

// New returns an Observer whose instruments are made by the meter provider.
func New(opts ...Option) (*Observer, error) {
	c := config{
		durationSB: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		ageSB:      []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400},
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	m := c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(babelqueue.Version))
	o := &Observer{}
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		ctr, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit("{delivery}"))
		errs = append(errs, err)
		return ctr
	}
	o.received = counter("babelqueue.deliveries.received", "Deliveries received, counted once settled.")
	o.handled = counter("babelqueue.deliveries.handled", "Handler calls, by outcome.")
	o.settled = counter("babelqueue.deliveries.settled", "Settlements the broker confirmed, by action.")
	o.retried = counter("babelqueue.deliveries.retried", "Deliveries re-published with attempts+1.")
	o.deadLettered = counter("babelqueue.deliveries.dead_lettered", "Deliveries written to the dead-letter queue, by reason.")
	o.dropped = counter("babelqueue.deliveries.dropped", "Deliveries acknowledged without a write, by kind.")
	o.poison = counter("babelqueue.deliveries.poison", "Bodies that are not usable envelopes.")
	o.rejected = counter("babelqueue.deliveries.gate_rejected", "Deliveries the schema-version gate rejected.")
	o.rewound = counter("babelqueue.deliveries.rewound", "Deliveries given back to the broker to redeliver.")
	var err error
	o.settleFailures, err = m.Int64Counter("babelqueue.settle.failures", metric.WithUnit("{settlement}"),
		metric.WithDescription("Settlements the broker did not confirm (the delivery was rewound)."))
	errs = append(errs, err)
	o.published, err = m.Int64Counter("babelqueue.published", metric.WithUnit("{message}"),
		metric.WithDescription("Messages published, by outcome."))
	errs = append(errs, err)
	o.receiveErrors, err = m.Int64Counter("babelqueue.receive.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Receives that failed (the broker went away)."))
	errs = append(errs, err)
	o.duration, err = m.Float64Histogram("babelqueue.handler.duration", metric.WithUnit("s"),
		metric.WithDescription("How long handlers ran."), metric.WithExplicitBucketBoundaries(c.durationSB...))
	errs = append(errs, err)
	o.age, err = m.Float64Histogram("babelqueue.delivery.age", metric.WithUnit("s"),
		metric.WithDescription("How old a message was when it was received (now - meta.created_at)."),
		metric.WithExplicitBucketBoundaries(c.ageSB...))
	errs = append(errs, err)
	o.inFlight, err = m.Int64ObservableUpDownCounter("babelqueue.deliveries.in_flight", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries received and not yet settled."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	o.registration, err = m.RegisterCallback(o.observeInFlight, o.inFlight)
	if err != nil {
		return nil, err
	}
	return o, nil
}

// Close unregisters the in-flight callback; the counters stay with the meter provider.
func (o *Observer) Close() error { return o.registration.Unregister() }

func (o *Observer) observeInFlight(_ context.Context, obs metric.Observer) error {
	o.queues.Range(func(k, v any) bool {
		obs.ObserveInt64(o.inFlight, v.(*atomic.Int64).Load(), o.attrs(labelKey{queue: k.(string)}))
		return true
	})
	return nil
}

func (o *Observer) gauge(queue string) *atomic.Int64 {
	if v, ok := o.queues.Load(queue); ok {
		return v.(*atomic.Int64)
	}
	v, _ := o.queues.LoadOrStore(queue, new(atomic.Int64))
	return v.(*atomic.Int64)
}

// OnReceive counts the delivery in flight.
func (o *Observer) OnReceive(_ context.Context, d babelqueue.DeliveryInfo) {
	o.gauge(d.Queue).Add(1)
}

// OnHandled records the handler's outcome and duration, and the message's age when it
// was received (the handler started).
func (o *Observer) OnHandled(ctx context.Context, e babelqueue.HandledEvent) {
	d := e.Delivery // a handler ran for it: its URN is a label value
	outcome := handlerOutcome(e.Err)
	k := labelKey{queue: d.Queue, urn: d.URN, lang: langLabel(d.Lang), extra: outcome, extraKey: "outcome"}
	attrs := o.attrs(k)
	o.handled.Add(ctx, 1, attrs)
	o.duration.Record(ctx, e.Duration.Seconds(), attrs)
	if d.CreatedAt > 0 {
		started := time.Now().Add(-e.Duration)
		o.age.Record(ctx, started.Sub(time.UnixMilli(d.CreatedAt)).Seconds(), o.attrs(labelKey{queue: d.Queue, urn: d.URN, lang: k.lang}))
	}
}

// OnSettled records the settlement and the counters of its delivery.
func (o *Observer) OnSettled(ctx context.Context, e babelqueue.SettledEvent) {
	d := e.Delivery
	o.gauge(d.Queue).Add(-1)
	base := labelKey{queue: d.Queue, urn: urnLabel(d, e.Kind), lang: langLabel(d.Lang)}
	attrs := o.attrs(base)
	o.received.Add(ctx, 1, attrs)
	if e.Kind == babelqueue.KindUnknownURN && d.CreatedAt > 0 {
		// No handler ran: the settlement started as soon as the delivery was received.
		started := time.Now().Add(-e.Duration)
		o.age.Record(ctx, started.Sub(time.UnixMilli(d.CreatedAt)).Seconds(), attrs)
	}
	switch e.Kind {
	case babelqueue.KindPoison:
		o.poison.Add(ctx, 1, o.attrs(labelKey{queue: d.Queue}))
	case babelqueue.KindSchemaRejected:
		o.rejected.Add(ctx, 1, o.attrs(labelKey{queue: d.Queue}))
	}
	if e.Err != nil {
		o.settleFailures.Add(ctx, 1, o.attrs(base.with("outcome", string(e.Action))))
		if !errors.Is(e.Err, transport.ErrAlreadySettled) {
			o.rewound.Add(ctx, 1, attrs) // the runtime gives the delivery back
		}
		return
	}
	o.settled.Add(ctx, 1, o.attrs(base.with("outcome", string(e.Action))))
	switch e.Action {
	case babelqueue.ActionRetry, babelqueue.ActionPoisonRetry:
		o.retried.Add(ctx, 1, attrs)
	case babelqueue.ActionDeadLetter, babelqueue.ActionPoisonDeadLetter, babelqueue.ActionRawDeadLetter:
		o.deadLettered.Add(ctx, 1, o.attrs(base.with("reason", deadLetterReason(e))))
	case babelqueue.ActionDrop:
		o.dropped.Add(ctx, 1, o.attrs(base.with("reason", string(e.Kind))))
	case babelqueue.ActionRewind:
		o.rewound.Add(ctx, 1, attrs)
	}
}

// OnPublished counts a publish.
func (o *Observer) OnPublished(ctx context.Context, e babelqueue.PublishedEvent) {
	outcome := OutcomeSuccess
	if e.Err != nil {
		outcome = OutcomeError
	}
	o.published.Add(ctx, 1, o.attrs(labelKey{queue: e.Queue, urn: e.URN, extra: outcome, extraKey: "outcome"}))
}

// OnReceiveError counts a failed receive.
func (o *Observer) OnReceiveError(ctx context.Context, e babelqueue.ReceiveErrorEvent) {
	o.receiveErrors.Add(ctx, 1, o.attrs(labelKey{queue: e.Queue}))
}

// urnLabel is the urn label of a settled delivery: its URN when a handler was found
// for it, "unknown" when none was, "none" when it has no URN.
func urnLabel(d babelqueue.DeliveryInfo, k babelqueue.Kind) string {
	switch k {
	case babelqueue.KindPoison, babelqueue.KindSchemaRejected:
		return None
	case babelqueue.KindUnknownURN:
		return URNUnknown
	}
	return d.URN
}

func handlerOutcome(err error) string {
	if err == nil {
		return OutcomeSuccess
	}
	var (
		requeue *babelqueue.RequeueError
		noRetry *babelqueue.NoRetryError
		panicE  *babelqueue.PanicError
	)
	switch {
	case errors.As(err, &requeue):
		return OutcomeRequeue
	case errors.As(err, &noRetry):
		return OutcomeNoRetry
	case errors.As(err, &panicE):
		return OutcomePanic
	case errors.Is(err, babelqueue.ErrHandlerTimeout):
		return OutcomeTimeout
	}
	return OutcomeError
}

func deadLetterReason(e babelqueue.SettledEvent) string {
	switch {
	case e.Reason != "":
		return e.Reason
	case e.Kind == babelqueue.KindPoison:
		return babelqueue.ReasonPoison
	case e.Kind == babelqueue.KindSchemaRejected:
		return string(babelqueue.KindSchemaRejected)
	}
	return "raw"
}

// langLabel bounds meta.lang to the family's languages.
func langLabel(lang string) string {
	switch lang {
	case "php", "go", "python", "java", "dotnet", "node":
		return lang
	case "":
		return None
	}
	return LangOther
}

// labelKey names one attribute set; every field takes a bounded set of values.
type labelKey struct {
	queue, urn, lang string
	extraKey, extra  string
}

func (k labelKey) with(key, value string) labelKey {
	k.extraKey, k.extra = key, value
	return k
}

// attrs returns the measurement option of k's attribute set, built once.
func (o *Observer) attrs(k labelKey) metric.MeasurementOption {
	if v, ok := o.labels.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	kv := make([]attribute.KeyValue, 0, 4)
	kv = append(kv, attribute.String("queue", k.queue))
	if k.urn != "" {
		kv = append(kv, attribute.String("urn", k.urn))
	}
	if k.lang != "" {
		kv = append(kv, attribute.String("lang", k.lang))
	}
	if k.extraKey != "" {
		kv = append(kv, attribute.String(k.extraKey, k.extra))
	}
	v, _ := o.labels.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return v.(metric.MeasurementOption)
}
