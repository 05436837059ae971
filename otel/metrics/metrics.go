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
//	babelqueue_deliveries_received_total{queue,lang}             deliveries received, by producing language
//	babelqueue_handler_duration_seconds{queue,urn,outcome}       histogram; its _count is the deliveries handled, by outcome:
//	                                                             success, error, no_retry, requeue, panic, timeout
//	babelqueue_delivery_age_seconds{queue,urn}                   histogram: now − meta.created_at when the delivery is received
//	babelqueue_deliveries_settled_total{queue,urn,outcome}       confirmed settlements; outcome: the action (ack, retry,
//	                                                             release, dead_letter, poison_dead_letter, poison_retry,
//	                                                             raw_dead_letter, handoff, drop, rewind)
//	babelqueue_deliveries_retried_total{queue,urn,lang}          re-published with attempts+1 (poison: the bounded re-publish)
//	babelqueue_deliveries_dead_lettered_total{queue,urn,lang,reason}  reason: failed, unknown_urn, poison, schema_rejected, raw
//	babelqueue_deliveries_dropped_total{queue,urn,lang,reason}   acknowledged without a write; reason: the delivery's kind
//	babelqueue_deliveries_rewound_total{queue,urn,lang}          given back to the broker to redeliver
//	babelqueue_settle_failures_total{queue,urn,lang,outcome}     settlements the broker did not confirm (then rewound); outcome:
//	                                                             the action, or "pipelined" for a settlement counted in
//	                                                             deliveries_settled_total whose writes failed afterwards
//	babelqueue_deliveries_poison_total{queue}                    bodies that are not usable envelopes
//	babelqueue_deliveries_gate_rejected_total{queue}             schema-version gate rejections
//	babelqueue_deliveries_in_flight{queue}                       received and not yet settled
//	babelqueue_published_total{queue,urn,outcome}                App.Publish calls: success or error
//	babelqueue_receive_errors_total{queue}                       failed receives (the broker went away)
//
// A [QueueCollector] adds what the queues hold, counted on an interval through the
// broker (not per delivery), for a process that consumes or only publishes:
//
//	babelqueue_queue_messages_ready{queue}                   waiting to be delivered
//	babelqueue_queue_messages_in_flight{queue}               delivered and not yet settled
//	babelqueue_queue_messages_delayed{queue}                 waiting out a delay
//	babelqueue_queue_messages_dead_lettered{queue}           in the queue's dead-letter queue
//	babelqueue_queue_oldest_message_age_seconds{queue}       how long the oldest ready message has waited
//	babelqueue_queue_partition_lag{queue,partition}          Kafka: records the group has not committed
//	babelqueue_queue_partition_lag_seconds{queue,partition}  Kafka: how long the first of them has waited
//	babelqueue_queue_messages_appended_total{queue}          Kafka: records ever written
//	babelqueue_queue_stats_errors_total{queue}               rounds the broker did not answer
//
// A count a broker cannot tell is left out rather than reported as 0 (the table in
// docs/operations.md says which broker tells which). docs/alerts.yml holds alert rules
// on both kinds of metric, tested with promtool.
//
// The series every delivery touches carry the fewest labels (the SDK's cost grows with
// them); the ones of retries, dead letters, drops and failures carry lang too.
//
// # Cardinality
//
// Every label has a bounded set of values. queue is a queue the app consumes or
// publishes to. urn is a URN the app has a handler for; every other URN shares the value
// "unknown", and a delivery with no URN (poison, a schema-version rejection) has
// "none": a flood of junk URNs adds no series. lang is one of the family's languages
// (php, go, python, java, dotnet, node), "other" for any other value and "none" when
// missing. outcome and reason take the few values listed above. The counters with a urn
// are recorded once a handler was looked up for the delivery (when it is handled or
// settled), so an unknown URN is known as such; received, counted as a delivery
// arrives, has no urn. A publish's urn is the one the code published, bounded by the
// code.
//
// # Cost
//
// The counters and in_flight are atomic integers per series, reported to asynchronous
// instruments when the metrics are collected: a count is an atomic add. Each hook finds
// the series of a delivery with one lookup by queue (receive) or by queue and URN, which
// holds the options of both histograms, built once, and the cells of the commonest
// counters. The two histograms (handler duration, age) are recorded through the SDK,
// most of the Observer's cost, except on the provider of a [Prometheus]: it keeps them
// itself, in lock-free cells per series that its exporter reads when scraped (the same
// names, units, bounds, labels and cumulative counts; no exemplars, and an aggregation
// selector given to NewPrometheus does not apply to them). Nothing allocates per
// delivery. BENCHMARKS.md has the figures.
package metrics

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"maps"
	"slices"
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

// The two histograms' names and descriptions.
const (
	nameDuration = "babelqueue.handler.duration"
	descDuration = "How long handlers ran, by outcome (its count: the deliveries handled)."
	nameAge      = "babelqueue.delivery.age"
	descAge      = "How old a message was when it was received (now - meta.created_at)."
)

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

// OutcomePipelined is the outcome label of settle_failures_total for a settlement whose
// writes failed after it was counted as made (pipelined settle writes).
const OutcomePipelined = "pipelined"

// Option configures [New] and [NewQueueCollector]; each ignores the options that
// concern only the other.
type Option func(*config)

type config struct {
	mp         metric.MeterProvider
	durationSB []float64
	ageSB      []float64
	interval   time.Duration        // of a QueueCollector
	log        *slog.Logger         // of a QueueCollector
	attrs      []attribute.KeyValue // of a QueueCollector
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
	received, settled, retried, deadLettered, dropped *counter
	poison, rejected, rewound, settleFailures         *counter
	published, receiveErrors                          *counter
	counters                                          []*counter
	duration, age                                     metric.Float64Histogram // through the SDK
	ownDuration, ownAge                               *histogram              // kept by a Prometheus, instead
	inFlight                                          metric.Int64ObservableUpDownCounter
	registration                                      metric.Registration

	histograms cow[labels, []metric.RecordOption]
	queues     cow[string, *queueSeries]
	routes     cow[route, *routeSeries]
	// The series found last: an app's deliveries mostly share a queue and a few URNs,
	// and comparing two strings is cheaper than hashing them for the map.
	lastQueue atomic.Pointer[queueSeries]
	lastRoute atomic.Pointer[routeSeries]
}

// queueSeries is what a delivery counts on its queue alone, found with one lookup: the
// deliveries in flight and, by lang, the received counter's cells.
type queueSeries struct {
	name     string
	inFlight atomic.Int64
	attrs    metric.ObserveOption // of in_flight
	received [len(langs)]atomic.Pointer[cell]
}

// route is a queue and a urn label.
type route struct{ queue, urn string }

// routeSeries is what a delivery counts on its queue and URN, found with one lookup: the
// options of its histograms (built with the route) and the cells of its commonest
// counters (made on first use, so a series that never counts is never reported).
type routeSeries struct {
	route
	queue     *queueSeries
	duration  [len(outcomes)][]metric.RecordOption // by handler outcome
	age       []metric.RecordOption
	ownDur    [len(outcomes)]*hcell // the same series in a Prometheus's own histograms
	ownAge    *hcell
	acked     atomic.Pointer[cell]    // settled{outcome=ack}
	published [2]atomic.Pointer[cell] // published{outcome=success|error}
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
	newCounter := func(name, unit, desc string) *counter {
		inst, err := m.Int64ObservableCounter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		ctr := &counter{inst: inst}
		o.counters = append(o.counters, ctr)
		return ctr
	}
	histogram := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	var own *ownHistograms
	if p, ok := c.mp.(*promProvider); ok {
		own = p.hists
	}
	o.received = newCounter("babelqueue.deliveries.received", "{delivery}", "Deliveries received.")
	o.settled = newCounter("babelqueue.deliveries.settled", "{delivery}", "Settlements the broker confirmed, by action.")
	o.retried = newCounter("babelqueue.deliveries.retried", "{delivery}", "Deliveries re-published with attempts+1.")
	o.deadLettered = newCounter("babelqueue.deliveries.dead_lettered", "{delivery}", "Deliveries written to the dead-letter queue, by reason.")
	o.dropped = newCounter("babelqueue.deliveries.dropped", "{delivery}", "Deliveries acknowledged without a write, by kind.")
	o.poison = newCounter("babelqueue.deliveries.poison", "{delivery}", "Bodies that are not usable envelopes.")
	o.rejected = newCounter("babelqueue.deliveries.gate_rejected", "{delivery}", "Deliveries the schema-version gate rejected.")
	o.rewound = newCounter("babelqueue.deliveries.rewound", "{delivery}", "Deliveries given back to the broker to redeliver.")
	o.settleFailures = newCounter("babelqueue.settle.failures", "{settlement}", "Settlements the broker did not confirm (the delivery was rewound).")
	o.published = newCounter("babelqueue.published", "{message}", "Messages published, by outcome.")
	o.receiveErrors = newCounter("babelqueue.receive.errors", "{error}", "Receives that failed (the broker went away).")
	if own != nil {
		var err error
		o.ownDuration, o.ownAge, err = own.use(c.durationSB, c.ageSB, descDuration, descAge)
		errs = append(errs, err)
	} else {
		o.duration = histogram(nameDuration, descDuration, c.durationSB)
		o.age = histogram(nameAge, descAge, c.ageSB)
	}
	var err error
	o.inFlight, err = m.Int64ObservableUpDownCounter("babelqueue.deliveries.in_flight", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries received and not yet settled."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	observables := []metric.Observable{o.inFlight}
	for _, c := range o.counters {
		observables = append(observables, c.inst)
	}
	o.registration, err = m.RegisterCallback(o.observe, observables...)
	if err != nil {
		return nil, err
	}
	return o, nil
}

// Close unregisters the callback that reports the counters; the histograms stay with
// the meter provider (or the Prometheus).
func (o *Observer) Close() error { return o.registration.Unregister() }

// observe reports the counters and the in-flight gauges when the metrics are collected.
func (o *Observer) observe(_ context.Context, obs metric.Observer) error {
	for _, c := range o.counters {
		for _, cell := range c.cells.all() {
			obs.ObserveInt64(c.inst, cell.n.Load(), cell.attrs)
		}
	}
	for _, q := range o.queues.all() {
		obs.ObserveInt64(o.inFlight, q.inFlight.Load(), q.attrs)
	}
	return nil
}

func (o *Observer) queue(queue string) *queueSeries {
	if q := o.lastQueue.Load(); q != nil && q.name == queue {
		return q
	}
	q := o.queues.get(queue, func() *queueSeries {
		return &queueSeries{name: queue, attrs: metric.WithAttributeSet(labels{queue: queue}.set())}
	})
	o.lastQueue.Store(q)
	return q
}

func (o *Observer) route(queue, urn string) *routeSeries {
	if r := o.lastRoute.Load(); r != nil && r.urn == urn && r.route.queue == queue {
		return r
	}
	r := o.routes.get(route{queue, urn}, func() *routeSeries {
		r := &routeSeries{route: route{queue, urn}, queue: o.queue(queue)}
		age := labels{queue: queue, urn: urn}
		if o.ownAge != nil {
			r.ownAge = o.ownAge.cell(age)
			for i, outcome := range outcomes {
				r.ownDur[i] = o.ownDuration.cell(age.with("outcome", outcome))
			}
			return r
		}
		r.age = o.record(age)
		for i, outcome := range outcomes {
			r.duration[i] = o.record(age.with("outcome", outcome))
		}
		return r
	})
	o.lastRoute.Store(r)
	return r
}

// recordAge records a delivery's age in seconds on its route's series.
func (o *Observer) recordAge(ctx context.Context, r *routeSeries, v float64) {
	if r.ownAge != nil {
		r.ownAge.record(v)
		return
	}
	o.age.Record(ctx, v, r.age...)
}

// cached returns the cell in p, taking it from c (labels l) the first time.
func cached(p *atomic.Pointer[cell], c *counter, l labels) *cell {
	if ce := p.Load(); ce != nil {
		return ce
	}
	ce := c.cell(l)
	p.Store(ce)
	return ce
}

// record is the options of a histogram measurement with labels l, built once.
func (o *Observer) record(l labels) []metric.RecordOption {
	return o.histograms.get(l, func() []metric.RecordOption {
		return []metric.RecordOption{metric.WithAttributeSet(l.set())}
	})
}

// OnReceive counts the delivery received and in flight.
func (o *Observer) OnReceive(_ context.Context, d babelqueue.DeliveryInfo) {
	q := o.queue(d.Queue)
	q.inFlight.Add(1)
	lang := langIndex(d.Lang)
	cached(&q.received[lang], o.received, labels{queue: d.Queue, lang: langs[lang]}).n.Add(1)
}

// OnHandled records the handler's duration by outcome, and the message's age when it
// was received (when the handler started).
func (o *Observer) OnHandled(ctx context.Context, e babelqueue.HandledEvent) {
	d := e.Delivery // a handler ran for it: its URN is a label value
	r := o.route(d.Queue, d.URN)
	if r.ownAge != nil {
		r.ownDur[handlerOutcome(e.Err)].record(e.Duration.Seconds())
	} else {
		o.duration.Record(ctx, e.Duration.Seconds(), r.duration[handlerOutcome(e.Err)]...)
	}
	if d.CreatedAt > 0 {
		start := e.Start
		if start.IsZero() { // an event not made by the runtime
			start = time.Now().Add(-e.Duration)
		}
		o.recordAge(ctx, r, ageAt(start, d.CreatedAt))
	}
}

// ageAt is the age in seconds at t of a message created at createdMs (Unix ms).
func ageAt(t time.Time, createdMs int64) float64 {
	return float64(t.UnixMilli()-createdMs) / 1000
}

// OnSettled records the settlement.
func (o *Observer) OnSettled(ctx context.Context, e babelqueue.SettledEvent) {
	d := e.Delivery
	urn := urnLabel(d, e.Kind)
	r := o.route(d.Queue, urn)
	r.queue.inFlight.Add(-1)
	if e.Err == nil && e.Action == babelqueue.ActionAck && e.Kind == babelqueue.KindHandled { // the commonest
		cached(&r.acked, o.settled, labels{queue: d.Queue, urn: urn, key: "outcome", value: string(e.Action)}).n.Add(1)
		return
	}
	if e.Kind == babelqueue.KindUnknownURN && d.CreatedAt > 0 {
		// No handler ran: the settlement started as soon as the delivery was received.
		o.recordAge(ctx, r, ageAt(time.Now().Add(-e.Duration), d.CreatedAt))
	}
	switch e.Kind {
	case babelqueue.KindPoison:
		o.poison.add(labels{queue: d.Queue})
	case babelqueue.KindSchemaRejected:
		o.rejected.add(labels{queue: d.Queue})
	}
	// The rarer counters carry the producing language too.
	full := labels{queue: d.Queue, urn: urn, lang: langLabel(d.Lang)}
	if e.Err != nil {
		o.settleFailures.add(full.with("outcome", string(e.Action)))
		if !errors.Is(e.Err, transport.ErrAlreadySettled) {
			o.rewound.add(full) // the runtime gives the delivery back
		}
		return
	}
	o.settled.add(labels{queue: d.Queue, urn: urn, key: "outcome", value: string(e.Action)})
	switch e.Action {
	case babelqueue.ActionRetry, babelqueue.ActionPoisonRetry:
		o.retried.add(full)
	case babelqueue.ActionDeadLetter, babelqueue.ActionPoisonDeadLetter, babelqueue.ActionRawDeadLetter:
		o.deadLettered.add(full.with("reason", deadLetterReason(e)))
	case babelqueue.ActionDrop:
		o.dropped.add(full.with("reason", string(e.Kind)))
	case babelqueue.ActionRewind:
		o.rewound.add(full)
	}
}

// OnSettleFailed counts a settlement whose writes failed after it was counted as made
// (pipelined settle writes): settle_failures_total with outcome "pipelined". The
// delivery comes again and is counted again.
func (o *Observer) OnSettleFailed(_ context.Context, e babelqueue.SettleFailedEvent) {
	d := e.Delivery
	o.settleFailures.add(labels{queue: d.Queue, urn: urnLabel(d, e.Kind), lang: langLabel(d.Lang), key: "outcome", value: OutcomePipelined})
}

// OnPublished counts a publish.
func (o *Observer) OnPublished(_ context.Context, e babelqueue.PublishedEvent) {
	i, outcome := 0, OutcomeSuccess
	if e.Err != nil {
		i, outcome = 1, OutcomeError
	}
	r := o.route(e.Queue, e.URN)
	cached(&r.published[i], o.published, labels{queue: e.Queue, urn: e.URN, key: "outcome", value: outcome}).n.Add(1)
}

// OnReceiveError counts a failed receive.
func (o *Observer) OnReceiveError(_ context.Context, e babelqueue.ReceiveErrorEvent) {
	o.receiveErrors.add(labels{queue: e.Queue})
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

// outcomes are the handler outcomes; a route's duration options are in this order.
var outcomes = [...]string{OutcomeSuccess, OutcomeError, OutcomeNoRetry, OutcomeRequeue, OutcomePanic, OutcomeTimeout}

// handlerOutcome is the index in outcomes of a handler's outcome.
func handlerOutcome(err error) int {
	if err == nil {
		return 0
	}
	return slices.Index(outcomes[:], failedOutcome(err))
}

// failedOutcome is the outcome of a handler that returned err (its own function, so
// that a success does not pay for the errors.As targets on the heap).
func failedOutcome(err error) string {
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

// langs are the values of the lang label, in the order langIndex numbers them.
var langs = [...]string{"php", "go", "python", "java", "dotnet", "node", None, LangOther}

// langIndex is the index in langs of meta.lang's label: the family's languages
// themselves, none when missing, other for anything else.
func langIndex(lang string) int {
	switch lang {
	case "php":
		return 0
	case "go":
		return 1
	case "python":
		return 2
	case "java":
		return 3
	case "dotnet":
		return 4
	case "node":
		return 5
	case "":
		return 6
	}
	return 7
}

// langLabel bounds meta.lang to the family's languages.
func langLabel(lang string) string { return langs[langIndex(lang)] }

// labels are the attributes of one series: queue, and urn, lang and key=value when
// not "". Every field takes a bounded set of values.
type labels struct {
	queue, urn, lang string
	key, value       string
}

func (l labels) with(key, value string) labels {
	l.key, l.value = key, value
	return l
}

func (l labels) set() attribute.Set {
	kvs := make([]attribute.KeyValue, 0, 4)
	kvs = append(kvs, attribute.String("queue", l.queue))
	if l.urn != "" {
		kvs = append(kvs, attribute.String("urn", l.urn))
	}
	if l.lang != "" {
		kvs = append(kvs, attribute.String("lang", l.lang))
	}
	if l.key != "" {
		kvs = append(kvs, attribute.String(l.key, l.value))
	}
	return attribute.NewSet(kvs...)
}

// counter is a cumulative counter kept in atomic cells, one per series, and reported
// to its asynchronous instrument when the metrics are collected: a count costs one map
// lookup and one atomic add.
type counter struct {
	inst  metric.Int64ObservableCounter
	cells cow[labels, *cell]
}

type cell struct {
	n     atomic.Int64
	attrs metric.ObserveOption
}

func (c *counter) add(l labels) { c.cell(l).n.Add(1) }

// cell is the cell of the series with labels l.
func (c *counter) cell(l labels) *cell {
	return c.cells.get(l, func() *cell { return &cell{attrs: metric.WithAttributeSet(l.set())} })
}

// cow is a copy-on-write map for values built once and read on every measurement: a
// read is one atomic load and a map lookup, with no lock and no allocation.
type cow[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex
}

// get returns the value of k, storing build() first when there is none.
func (c *cow[K, V]) get(k K, build func() V) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
	}
	next := make(map[K]V, 1)
	if old != nil {
		maps.Copy(next, *old)
	}
	v := build()
	next[k] = v
	c.m.Store(&next)
	return v
}

// all iterates over the map as it is now.
func (c *cow[K, V]) all() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		if m := c.m.Load(); m != nil {
			for k, v := range *m {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}
