package metrics

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/queuestats"
	"github.com/babelqueue-go/babelqueue/transport"
)

// DefaultInterval is how often a [QueueCollector] counts its queues unless
// [WithInterval] says otherwise.
const DefaultInterval = 15 * time.Second

// WithInterval sets how often a [QueueCollector] counts its queues (default
// [DefaultInterval]). Each round asks the broker about every queue and its dead-letter
// queue, so a shorter interval costs the broker more; New ignores it.
func WithInterval(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.interval = d
		}
	}
}

// WithLogger sets the logger a [QueueCollector] tells of a broker that stops answering,
// and of its recovery (default slog.Default()); New ignores it.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.log = l
		}
	}
}

// WithAttributes adds constant labels to every series of a [QueueCollector], such as
// broker="…" when one process exports the queues of several brokers whose queue names
// may meet (keep them few and fixed: each is a label of every series); New ignores
// it.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

// QueuesOf is the queue an app consumes and the dead-letter queue it writes to, for
// [NewQueueCollector].
func QueuesOf(app *babelqueue.App) []queuestats.Queue {
	return []queuestats.Queue{{Name: app.Queue(), DLQ: app.DeadLetterQueue()}}
}

// QueueCollector reports what queues hold as gauges: it counts each queue and its
// dead-letter queue on a broker every interval ([WithInterval]) through
// [queuestats.Take], never per delivery, and the gauges report the last counts when
// the metrics are collected. It needs no [babelqueue.App]: a process that only
// publishes, or a sidecar, can export the backlog of queues it does not consume.
//
//	babelqueue_queue_messages_ready{queue}             messages waiting to be delivered
//	babelqueue_queue_messages_in_flight{queue}         delivered and not yet settled
//	babelqueue_queue_messages_delayed{queue}           waiting out a delay (a retry tier)
//	babelqueue_queue_messages_dead_lettered{queue}     messages in the queue's dead-letter queue
//	babelqueue_queue_oldest_message_age_seconds{queue} how long the oldest ready message has waited
//	babelqueue_queue_partition_lag{queue,partition}    Kafka: records the group has not committed
//	babelqueue_queue_partition_lag_seconds{queue,partition}  Kafka: age of the first of them
//	babelqueue_queue_messages_appended_total{queue}    Kafka: records ever written (a rate of arrivals)
//	babelqueue_queue_stats_errors_total{queue}         rounds in which the broker did not answer
//
// The queue label is the work queue's name (the dead-letter count is reported on its
// work queue's series), so the label set is the queues the collector was given, and
// partition is bounded by the topic's partitions. A count the broker cannot tell
// (transport.UnknownCount; see each driver's QueueStats: RabbitMQ has no in-flight or
// delayed count, SQS and RabbitMQ no age) is not reported, rather than reported as 0;
// nor is any count of a queue whose last round failed (counts that are not current
// disappear, so an alert on them does not act on stale numbers; the errors counter
// says why).
type QueueCollector struct {
	tr       transport.Transport
	queues   []queuestats.Queue
	interval time.Duration
	log      *slog.Logger
	attrs    []attribute.KeyValue

	ready, inFlight, delayed, deadLettered metric.Int64ObservableGauge
	age                                    metric.Float64ObservableGauge
	lag                                    metric.Int64ObservableGauge
	lagAge                                 metric.Float64ObservableGauge
	appended                               metric.Int64ObservableCounter
	errs                                   metric.Int64ObservableCounter
	registration                           metric.Registration

	state []*queueState // one per queue, in the order given
}

// queueState is the last round's result for one queue.
type queueState struct {
	attrs  metric.ObserveOption
	last   atomic.Pointer[queuestats.Snapshot] // nil: no current counts
	errors atomic.Int64
	mu     sync.Mutex // guards lastErr and parts
	// lastErr is the last error logged, so a broker that keeps failing the same way is
	// logged once.
	lastErr string
	parts   map[int32]metric.ObserveOption // partition label sets, built once
}

// NewQueueCollector returns a collector of the queues on tr (queue names with their
// dead-letter queues: an empty DLQ is the runtime's default name on tr; see
// [QueuesOf] for an app's). Its instruments are made by the meter provider
// ([WithMeterProvider]). Call [QueueCollector.Run] to count, and Close to stop
// reporting.
func NewQueueCollector(tr transport.Transport, queues []queuestats.Queue, opts ...Option) (*QueueCollector, error) {
	if tr == nil {
		return nil, errors.New("metrics: NewQueueCollector: nil transport")
	}
	if len(queues) == 0 {
		return nil, errors.New("metrics: NewQueueCollector: no queue to count")
	}
	c := config{interval: DefaultInterval}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	qc := &QueueCollector{tr: tr, interval: c.interval, log: c.log, attrs: c.attrs}
	seen := map[string]bool{}
	for _, q := range queues {
		if q.Name == "" {
			return nil, errors.New("metrics: NewQueueCollector: a queue without a name")
		}
		if seen[q.Name] {
			return nil, errors.New("metrics: NewQueueCollector: queue " + strconv.Quote(q.Name) + " given twice")
		}
		seen[q.Name] = true
		if q.DLQ == "" {
			q.DLQ = dlq.QueueFor(q.Name, tr.Capabilities())
		}
		qc.queues = append(qc.queues, q)
		qc.state = append(qc.state, &queueState{
			attrs: metric.WithAttributeSet(attribute.NewSet(append(slices.Clone(c.attrs), attribute.String("queue", q.Name))...)),
			parts: map[int32]metric.ObserveOption{},
		})
	}
	m := c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(babelqueue.Version))
	var errs []error
	gauge := func(name, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit("{message}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	seconds := func(name, desc string) metric.Float64ObservableGauge {
		g, err := m.Float64ObservableGauge(name, metric.WithUnit("s"), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		g, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	qc.ready = gauge("babelqueue.queue.messages.ready", "Messages waiting to be delivered.")
	qc.inFlight = gauge("babelqueue.queue.messages.in_flight", "Messages delivered to a consumer and not yet settled.")
	qc.delayed = gauge("babelqueue.queue.messages.delayed", "Messages waiting out a delay before they are ready.")
	qc.deadLettered = gauge("babelqueue.queue.messages.dead_lettered", "Messages in the queue's dead-letter queue.")
	qc.age = seconds("babelqueue.queue.oldest_message.age", "How long the oldest ready message has waited.")
	qc.lag = gauge("babelqueue.queue.partition.lag", "Records of a partition the consumer group has not committed.")
	qc.lagAge = seconds("babelqueue.queue.partition.lag_seconds", "How long the first record of a partition the group has not committed has waited.")
	qc.appended = counter("babelqueue.queue.messages.appended", "{message}", "Messages ever written to the queue (where the broker counts them).")
	qc.errs = counter("babelqueue.queue.stats.errors", "{error}", "Rounds in which the broker did not tell the queue's counts.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var err error
	qc.registration, err = m.RegisterCallback(qc.observe,
		qc.ready, qc.inFlight, qc.delayed, qc.deadLettered, qc.age, qc.lag, qc.lagAge, qc.appended, qc.errs)
	if err != nil {
		return nil, err
	}
	return qc, nil
}

// Close stops reporting the gauges (Run's context ends the counting).
func (c *QueueCollector) Close() error { return c.registration.Unregister() }

// Run counts the queues now and then every interval until ctx ends; it returns nil
// then. A broker that does not answer is logged (once, until it answers again) and
// asked again next round.
func (c *QueueCollector) Run(ctx context.Context) error {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		c.Collect(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Collect counts every queue once now, each within the interval, and keeps the counts
// for the gauges. Run calls it every interval; call it yourself to count on your own
// schedule instead.
func (c *QueueCollector) Collect(ctx context.Context) {
	for i, q := range c.queues {
		st := c.state[i]
		cctx, cancel := context.WithTimeout(ctx, c.interval)
		s, err := queuestats.Take(cctx, c.tr, q)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			st.last.Store(nil)
			st.errors.Add(1)
			st.note(c.log, q.Name, err)
			continue
		}
		st.last.Store(&s)
		st.note(c.log, q.Name, nil)
	}
}

// note logs a queue's failure when it first appears or changes, and its recovery.
func (st *queueState) note(log *slog.Logger, queue string, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err == nil {
		if st.lastErr != "" {
			log.Info("metrics: the broker tells the queue's counts again", "queue", queue)
		}
		st.lastErr = ""
		return
	}
	if msg := err.Error(); msg != st.lastErr {
		log.Warn("metrics: counting a queue failed; its gauges are not reported until it answers", "queue", queue, "err", msg)
		st.lastErr = msg
	}
}

// partition returns the label set of a partition of the queue.
func (st *queueState) partition(attrs []attribute.KeyValue, queue string, p int32) metric.ObserveOption {
	st.mu.Lock()
	defer st.mu.Unlock()
	o, ok := st.parts[p]
	if !ok {
		o = metric.WithAttributeSet(attribute.NewSet(append(slices.Clone(attrs),
			attribute.String("queue", queue), attribute.String("partition", strconv.Itoa(int(p))))...))
		st.parts[p] = o
	}
	return o
}

// observe reports the last counts when the metrics are collected.
func (c *QueueCollector) observe(_ context.Context, o metric.Observer) error {
	known := func(g metric.Int64ObservableGauge, n int64, attrs metric.ObserveOption) {
		if n != transport.UnknownCount {
			o.ObserveInt64(g, n, attrs)
		}
	}
	for i, st := range c.state {
		o.ObserveInt64(c.errs, st.errors.Load(), st.attrs)
		s := st.last.Load()
		if s == nil {
			continue
		}
		known(c.ready, s.Stats.Ready, st.attrs)
		known(c.inFlight, s.Stats.InFlight, st.attrs)
		known(c.delayed, s.Stats.Delayed, st.attrs)
		known(c.deadLettered, s.DeadLettered(), st.attrs)
		if age, ok := s.OldestAge(); ok {
			o.ObserveFloat64(c.age, age.Seconds(), st.attrs)
		}
		if s.Stats.Appended != transport.UnknownCount {
			o.ObserveInt64(c.appended, s.Stats.Appended, st.attrs)
		}
		for _, p := range s.Stats.Partitions {
			attrs := st.partition(c.attrs, c.queues[i].Name, p.Partition)
			o.ObserveInt64(c.lag, p.Lag, attrs)
			if age, ok := p.LagAge(s.At); ok {
				o.ObserveFloat64(c.lagAge, age.Seconds(), attrs)
			}
		}
	}
	return nil
}
