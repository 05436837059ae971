// Package kafka is the Apache Kafka transport behind kafka:// URLs, built on franz-go.
//
// Import it for its side effect to make the scheme available to the runtime:
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/kafka"
//
// The URL is kafka://[user:password@]host:port[,host:port…][?param=value…] (the port
// defaults to 9092), with the parameters group, delivery_timeout, session_timeout,
// heartbeat_interval, dial_timeout, max_uncommitted, max_uncommitted_time,
// pipeline_settles, confirm, auto_create_topics, client_id, sasl, tls and the TLS
// parameters every scheme shares (tls_ca, tls_cert, tls_key, tls_server_name,
// tls_insecure: docs/security.md); each matches an [Option]. For anything else (OAuth, a
// custom dialer) build the clients yourself and use [New] with a [ConsumerFactory].
// A cluster's nodes ([driverkit.Hosts]) are the seed brokers; the client follows each
// partition's leader through a node's failure, and the producers wait for every in-sync
// replica (acks=all) and write idempotently, franz-go's defaults, which [Open] keeps.
//
// A record's value is the envelope, unchanged; the envelope is projected onto the bq-
// record headers and the record timestamp. Each consumer is one member of the consumer
// group; a record's offset is committed once it and every record before it on its
// partition are settled. Settle writes are pipelined and confirmed before the commit;
// delays are parked on <queue>.delay.<ms> topics; a [transport.ConsumeOptions]
// Transactional consumer settles in Kafka transactions. docs/transports/kafka.md
// describes the binding, the parameters, the commit and rebalance rules and their
// reasons.
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Record header names of the Kafka binding.
const (
	HeaderJob           = "bq-job"
	HeaderTraceID       = "bq-trace-id"
	HeaderMessageID     = "bq-message-id"
	HeaderSchemaVersion = "bq-schema-version"
	HeaderSourceLang    = "bq-source-lang"
	HeaderAttempts      = "bq-attempts"
	// HeaderDueAt is the Unix-millisecond time a parked (delayed) record is due.
	HeaderDueAt = "bq-due-at"
	// HeaderOriginalTopic names the queue a parked (delayed) record goes back to.
	HeaderOriginalTopic = "bq-original-topic"
)

// Defaults of the options.
const (
	// DefaultGroup is the consumer group used when none is configured.
	DefaultGroup = "babelqueue"
	// DefaultDeliveryTimeout bounds the wait for a settle write's delivery report.
	DefaultDeliveryTimeout = 30 * time.Second
	// DefaultSessionTimeout is how long the group waits for a member's heartbeat before
	// it takes the member's partitions back (franz-go's own is 45 s).
	DefaultSessionTimeout = 10 * time.Second
	// DefaultHeartbeatInterval is how often a consumer heartbeats to its group.
	DefaultHeartbeatInterval = time.Second
	// DefaultRequestTimeoutOverhead is how long the transport's clients wait for a
	// broker's answer beyond what the request itself allows (franz-go's own is 10 s): a
	// request on a connection gone silent fails after it and is sent again on a new
	// connection (docs/transports/kafka.md, URL).
	DefaultRequestTimeoutOverhead = 2500 * time.Millisecond
	// DefaultProduceRequestTimeout is how long a broker may take to answer a produce
	// request of the transport's clients (Kafka's request.timeout.ms; franz-go's own is
	// 10 s); the idempotent producer sends a produce that timed out again.
	DefaultProduceRequestTimeout = 2 * time.Second
	// DefaultDialTimeout bounds a connection attempt, and [Open]'s check that a broker answers.
	DefaultDialTimeout = 10 * time.Second
	// DefaultMaxUncommitted bounds the records a consumer hands out beyond its commits:
	// the most one consumer redelivers after a kill or a cut (BenchmarkMaxUncommitted).
	DefaultMaxUncommitted = 20000
	// DefaultMaxUncommittedTime bounds how long a consumer hands out records while its
	// commits fail.
	DefaultMaxUncommittedTime = 2 * time.Second
)

// ErrDelivery matches every [DeliveryError].
var ErrDelivery = errors.New("kafka: delivery not confirmed")

// ErrRevoked is returned by Settle for a delivery whose partition was revoked, or an
// earlier record of whose partition was rewound: the record will be delivered again.
// It matches [transport.ErrAlreadySettled].
var ErrRevoked = fmt.Errorf("kafka: partition revoked or rewound before the delivery was settled; it will be redelivered: %w", transport.ErrAlreadySettled)

// DeliveryError reports a write the broker did not confirm within the delivery timeout,
// or refused. It matches [ErrDelivery].
type DeliveryError struct {
	Topic string // the topic written to
	Err   error  // the broker's error, or context.DeadlineExceeded on a timeout
}

// Error describes the failed delivery.
func (e *DeliveryError) Error() string {
	return fmt.Sprintf("kafka: delivery to %q not confirmed: %v", e.Topic, e.Err)
}

// Unwrap returns the underlying error.
func (e *DeliveryError) Unwrap() error { return e.Err }

// Is makes the error match [ErrDelivery], and [transport.ErrAuth] when the broker
// refused the write for the user's ACLs.
func (e *DeliveryError) Is(target error) bool {
	return target == ErrDelivery || (target == transport.ErrAuth && isAuth(e.Err))
}

// ConsumerFactory builds the group-consuming client of one consumer from the options the
// transport passes (group, topics, callbacks, offsets), adding its own (seeds, TLS, SASL).
type ConsumerFactory func(opts ...kgo.Opt) (*kgo.Client, error)

// Factory returns a [ConsumerFactory] that builds clients from base followed by the
// transport's options.
func Factory(base ...kgo.Opt) ConsumerFactory {
	return func(opts ...kgo.Opt) (*kgo.Client, error) {
		return kgo.NewClient(append(slices.Clip(base), opts...)...)
	}
}

type config struct {
	group                                       string
	logger                                      *slog.Logger
	autoCreate, confirmPublish, pipelineSettles bool
	buffer, maxUncommitted                      int
	deliveryTimeout, metadataMaxAge             time.Duration
	commitInterval, maxUncommittedTime          time.Duration
	sessionTimeout, heartbeatInterval           time.Duration
	dialTimeout, txTimeout                      time.Duration // txTimeout: move.go's, tests shorten it
	tlsConfig                                   *tls.Config   // WithTLSConfig (secure.go)
	dialer                                      func(ctx context.Context, network, host string) (net.Conn, error)
}

// Option configures a [Transport]. A value an option cannot use makes [Open], [OpenURL]
// and [New] fail with a [*driverkit.OptionError] naming the option.
type Option func(*config)

// WithGroup sets the consumer group (default [DefaultGroup]).
func WithGroup(group string) Option { return func(c *config) { c.group = group } }

// WithDeliveryTimeout sets how long a settle write, or a confirmed publish, waits for its
// delivery report (default [DefaultDeliveryTimeout]).
func WithDeliveryTimeout(d time.Duration) Option { return func(c *config) { c.deliveryTimeout = d } }

// WithAutoCreateTopics sets whether the transport creates the topics it writes to when
// they are missing (default true); off, a missing dead-letter or delay topic of a
// consumer's settle writes is an error from Consume ([ErrMissingTopic]).
func WithAutoCreateTopics(on bool) Option { return func(c *config) { c.autoCreate = on } }

// WithLogger sets the logger of the transport and of franz-go's warnings (default: the
// logger of [transport.LoggerFrom] for [transport.Open], else slog.Default()); nil keeps
// the one set.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithSessionTimeout sets how long the group waits for a member's heartbeat (default
// [DefaultSessionTimeout], at least 1 s).
func WithSessionTimeout(d time.Duration) Option { return func(c *config) { c.sessionTimeout = d } }

// WithHeartbeatInterval sets how often a consumer heartbeats (default
// [DefaultHeartbeatInterval]); shorter than the session timeout.
func WithHeartbeatInterval(d time.Duration) Option {
	return func(c *config) { c.heartbeatInterval = d }
}

// WithDialer makes the clients [Open] builds dial every broker connection with dial (a
// proxy, a tunnel, a test's fault switch) instead of a net.Dialer; franz-go dials the
// addresses the cluster's metadata names, so a listening proxy would not carry them.
// The clients keep the transport's other settings. It cannot be combined with TLS
// (franz-go takes a dialer or a TLS configuration: dial TLS in dial yourself);
// [New] takes clients you built, with kgo.Dialer if you need one.
func WithDialer(dial func(ctx context.Context, network, host string) (net.Conn, error)) Option {
	return func(c *config) { c.dialer = dial }
}

// WithDialTimeout bounds a connection attempt (default [DefaultDialTimeout]).
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

// WithPipelinedSettles sets whether the runtime's settle writes are pipelined (default
// true): Settle returns once they are handed to the producer, and a write that fails
// rewinds the record. Off, Settle waits for them and returns a failure as a
// [transport.SettleWriteError].
func WithPipelinedSettles(on bool) Option { return func(c *config) { c.pipelineSettles = on } }

// WithConfirmedPublish makes [Transport.Publish] wait for the broker's acknowledgement,
// up to the delivery timeout (default false: fire-and-forget).
func WithConfirmedPublish(on bool) Option { return func(c *config) { c.confirmPublish = on } }

// WithMetadataRefresh sets how often a consumer looks for new delay topics of its queue
// (default 10 s, at least 1 s).
func WithMetadataRefresh(d time.Duration) Option { return func(c *config) { c.metadataMaxAge = d } }

// WithBuffer sets how many fetched records a consumer aims to hold ready (default 1024);
// it polls again once fewer than half are.
func WithBuffer(n int) Option { return func(c *config) { c.buffer = n } }

// WithCommitInterval sets the shortest pause between two background offset commits
// (default 100 ms).
func WithCommitInterval(d time.Duration) Option { return func(c *config) { c.commitInterval = d } }

// WithMaxUncommitted bounds the records a consumer hands out beyond its group's committed
// offsets (default [DefaultMaxUncommitted], at least 1): Receive waits at the bound.
func WithMaxUncommitted(n int) Option { return func(c *config) { c.maxUncommitted = n } }

// WithMaxUncommittedTime bounds how long a consumer goes on handing out records while a
// commit fails or does not answer (default [DefaultMaxUncommittedTime]).
func WithMaxUncommittedTime(d time.Duration) Option {
	return func(c *config) { c.maxUncommittedTime = d }
}

func defaults() config {
	return config{group: DefaultGroup, logger: slog.Default(), deliveryTimeout: DefaultDeliveryTimeout, autoCreate: true,
		metadataMaxAge: 10 * time.Second, buffer: 1024, commitInterval: 100 * time.Millisecond,
		maxUncommitted: DefaultMaxUncommitted, maxUncommittedTime: DefaultMaxUncommittedTime,
		sessionTimeout: DefaultSessionTimeout, heartbeatInterval: DefaultHeartbeatInterval,
		dialTimeout: DefaultDialTimeout, pipelineSettles: true, txTimeout: defaultTxTimeout}
}

// newConfig applies opts to the defaults.
func newConfig(opts []Option) config {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// check refuses the option values the transport cannot use, each a *driverkit.OptionError.
func (cfg *config) check() error {
	bad := driverkit.Options{Broker: "kafka"}
	if cfg.group == "" {
		bad.Invalid("WithGroup", "the consumer group name is empty")
	}
	bad.AtLeast("WithDeliveryTimeout", cfg.deliveryTimeout, 1)
	bad.AtLeast("WithSessionTimeout", cfg.sessionTimeout, time.Second)
	if cfg.heartbeatInterval <= 0 || cfg.heartbeatInterval >= cfg.sessionTimeout {
		bad.Invalid("WithHeartbeatInterval", "want a duration above zero and shorter than the session timeout (%s), got %s", cfg.sessionTimeout, cfg.heartbeatInterval)
	}
	bad.AtLeast("WithDialTimeout", cfg.dialTimeout, 1)
	bad.AtLeast("WithMetadataRefresh", cfg.metadataMaxAge, time.Second)
	bad.AtLeastN("WithBuffer", cfg.buffer, 1)
	bad.AtLeast("WithCommitInterval", cfg.commitInterval, 0)
	bad.AtLeastN("WithMaxUncommitted", cfg.maxUncommitted, 1)
	bad.AtLeast("WithMaxUncommittedTime", cfg.maxUncommittedTime, 1)
	return bad.Err()
}

// Transport is a connection to one Kafka cluster. It is safe for concurrent use.
type Transport struct {
	prod    *kgo.Client
	ownProd bool
	factory ConsumerFactory
	cfg     config
	log     *slog.Logger

	consumers driverkit.Group // the consumers opened, for Close

	mu   sync.Mutex
	live map[*consumer]struct{} // the consumers open, for delivered
	seen sync.Map               // topics this transport has written to successfully
	shut atomic.Bool            // closed: set under mu (background's bgWG.Add), read without it

	onPublished func(*kgo.Record, error) // t.published, bound once
	room        *producerRoom            // admission into prod's buffer (room.go); nil: none kept

	limit  atomic.Int64 // the largest record batch the producer and the broker accept
	stamps stampLimits  // per topic, the created_at too old for a record's timestamp (timestamp.go)

	failMu      sync.Mutex
	failCount   int              // publishes not delivered since the last Flush or Close
	failReports []*DeliveryError // the first maxReported of them

	streaks  sync.Map // topic → *streak: settle writes failed in a row
	repairMu sync.Mutex
	repaired map[string]time.Time // when a topic's metadata was last repaired

	bg       context.Context // background work: the broker limit lookup of New, hurry, repair
	stopBg   context.CancelFunc
	bgWG     sync.WaitGroup
	hurrying atomic.Bool // a hurry's flush is under way
}

var _ transport.Transport = (*Transport)(nil)

// New builds a transport around a producer client and a factory for consumer clients
// (nil when it only publishes). The producer stays yours: Close flushes it but does not
// close it. The broker's message.max.bytes is read in the background.
func New(producer *kgo.Client, factory ConsumerFactory, opts ...Option) (*Transport, error) {
	if producer == nil {
		return nil, errors.New("kafka: New needs a producer client")
	}
	t, err := newTransport(producer, false, factory, opts...)
	if err != nil {
		return nil, err
	}
	t.background(func() {
		ctx, cancel := context.WithTimeout(t.bg, t.cfg.dialTimeout)
		defer cancel()
		if err := t.loadLimit(ctx); err != nil && t.bg.Err() == nil {
			t.log.Warn("kafka: cannot read the broker's message.max.bytes; the producer's ProducerBatchMaxBytes alone bounds a record", "limit", t.limit.Load(), "err", err)
		}
	})
	return t, nil
}

// background runs fn on a goroutine of its own, which Close waits for, unless the
// transport is closed; it reports whether fn runs.
func (t *Transport) background(fn func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.shut.Load() {
		return false // Close may be waiting for bgWG already
	}
	t.bgWG.Add(1)
	go func() {
		defer t.bgWG.Done()
		fn()
	}()
	return true
}

func newTransport(producer *kgo.Client, own bool, factory ConsumerFactory, opts ...Option) (*Transport, error) {
	cfg := newConfig(opts)
	if err := cfg.check(); err != nil {
		return nil, err
	}
	t := &Transport{
		prod:     producer,
		ownProd:  own,
		factory:  factory,
		cfg:      cfg,
		log:      cfg.logger.With("transport", "kafka"),
		live:     map[*consumer]struct{}{},
		repaired: map[string]time.Time{},
	}
	t.onPublished = t.published
	t.room = newProducerRoom(producer)
	t.limit.Store(int64(producerLimit(producer)))
	t.bg, t.stopBg = context.WithCancel(context.Background())
	t.stamps.epoch = time.Now() // timestamp.go
	return t, nil
}

// Capabilities reports the Kafka binding's facts.
func (t *Transport) Capabilities() transport.Capabilities {
	return transport.Capabilities{
		Attempts:              transport.AttemptsHeaderAuthoritative,
		Delay:                 true,
		PoisonNeedsRetryTiers: true,
		SchemaGate:            true,
		DeadLetterSuffix:      ".dlq",
		PublishConfirmed:      t.cfg.confirmPublish,
	}
}

// Publish buffers one record and returns (fire-and-forget; a refused one is reported by
// [Transport.Flush] or [Transport.Close]), or waits for the broker with
// [WithConfirmedPublish]. A record too large is a [*transport.TooLargeError]. It blocks
// only while the producer's buffer is full, until ctx ends.
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	if t.cfg.confirmPublish {
		return t.publishConfirmedOne(ctx, m)
	}
	rec, err := t.record(ctx, m, time.Time{})
	if err != nil {
		return err
	}
	if t.room == nil && ctx.Done() != nil { // a producer of yours bounding its buffer in bytes
		return t.publishUnroomed(ctx, m.Queue, rec)
	}
	if t.room != nil {
		if err := t.room.wait(ctx); err != nil {
			return fmt.Errorf("kafka: publish to %q: the producer's buffer is full: %w", m.Queue, err)
		}
	}
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	t.prod.Produce(ctx, rec, t.onPublished)
	return nil
}

// publishUnroomed is Publish on a producer whose buffer the transport keeps no room of
// ([newProducerRoom]): ctx ends the wait for room in the buffer, and then Publish fails
// with its error (the record, failed before it was buffered, is not counted again as
// undelivered).
func (t *Transport) publishUnroomed(ctx context.Context, queue string, rec *kgo.Record) error {
	promise := func(r *kgo.Record, err error) {
		if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return // Publish returned the error
		}
		t.onPublished(r, err)
	}
	if t.produceUncancelled(ctx, rec, promise) {
		return fmt.Errorf("kafka: publish to %q: the producer's buffer is full: %w", queue, ctx.Err())
	}
	return nil
}

// publishConfirmedOne is Publish with ?confirm=1.
func (t *Transport) publishConfirmedOne(ctx context.Context, m *transport.Message) error {
	err := t.PublishConfirmed(ctx, []*transport.Message{m})
	var be *transport.BatchError
	if errors.As(err, &be) && len(be.Errs) == 1 {
		return be.Errs[0]
	}
	return err
}

// published is the delivery callback of Publish.
func (t *Transport) published(r *kgo.Record, err error) {
	t.room.free()
	if err != nil {
		t.log.Error("kafka: publish not delivered", "topic", r.Topic, "err", err)
		t.noteUndelivered(r.Topic, err)
		if needsRepair(err) {
			t.background(func() { t.repair(t.bg, r.Topic, err) })
		}
		return
	}
	t.delivered(r.Topic)
}

// maxReported bounds the failed publishes an [UndeliveredError] lists.
const maxReported = 16

// UndeliveredError reports the fire-and-forget publishes that were not delivered since
// the last [Transport.Flush] or [Transport.Close], which return it. It matches
// [ErrDelivery].
type UndeliveredError struct {
	Count int              // publishes not delivered
	Errs  []*DeliveryError // the first of them, at most 16
}

// Error says how many publishes were lost and why the first one was.
func (e *UndeliveredError) Error() string {
	msg := fmt.Sprintf("kafka: %d publishes not delivered", e.Count)
	if len(e.Errs) > 0 {
		msg += " (first: " + e.Errs[0].Error() + ")"
	}
	return msg
}

// Is makes the error match [ErrDelivery].
func (e *UndeliveredError) Is(target error) bool { return target == ErrDelivery }

// Unwrap returns the listed delivery errors.
func (e *UndeliveredError) Unwrap() []error {
	errs := make([]error, len(e.Errs))
	for i, de := range e.Errs {
		errs[i] = de
	}
	return errs
}

func (t *Transport) noteUndelivered(topic string, err error) {
	t.failMu.Lock()
	defer t.failMu.Unlock()
	t.failCount++
	if len(t.failReports) < maxReported {
		t.failReports = append(t.failReports, &DeliveryError{Topic: topic, Err: err})
	}
}

// takeUndelivered returns the publishes not delivered since the last call, if any.
func (t *Transport) takeUndelivered() error {
	t.failMu.Lock()
	defer t.failMu.Unlock()
	if t.failCount == 0 {
		return nil
	}
	err := &UndeliveredError{Count: t.failCount, Errs: t.failReports}
	t.failCount, t.failReports = 0, nil
	return err
}

// Flush waits until every buffered record is delivered or failed (or ctx ends) and
// returns an [*UndeliveredError] for the publishes not delivered since the last Flush.
func (t *Transport) Flush(ctx context.Context) error {
	var errs []error
	if err := t.prod.Flush(ctx); err != nil {
		errs = append(errs, fmt.Errorf("kafka: flushing buffered publishes: %w", err))
	}
	return errors.Join(append(errs, t.takeUndelivered())...)
}

// produceEach writes recs in order and returns each one's outcome, waiting up to the
// delivery timeout.
func (t *Transport) produceEach(ctx context.Context, recs []*kgo.Record) []error {
	errs := make([]error, len(recs))
	if t.isClosed() {
		for i := range errs {
			errs[i] = transport.ErrClosed
		}
		return errs
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.deliveryTimeout)
	defer cancel()
	rs := driverkit.NewReceipts(len(recs))
	for i := range recs {
		rs.Expect(i)
	}
	t.produce(ctx, recs, receipts{rs})
	// An awaited write does not wait out the producer's linger: flush until it is done.
	go func() { _ = t.prod.Flush(ctx) }()
	for i, err := range rs.Wait(ctx) {
		if err != nil {
			errs[i] = &DeliveryError{Topic: recs[i].Topic, Err: err}
		}
	}
	return errs
}

// receipts are produceEach's outcomes.
type receipts struct{ *driverkit.Receipts }

// Report records record i's outcome.
func (r receipts) Report(i int, err error) { r.Done(i, err) }

// reporter is told the outcome of each record of a produce: a settle write's
// *driverkit.Confirmations, or produceEach's receipts. An interface, not a func, so a
// settle write hands itself over without a closure.
type reporter interface{ Report(i int, err error) }

// produce hands recs to the producer, in order, and calls to.Report once for each: from
// its delivery promise, or with ctx's error for a record that found no room in the
// producer's buffer before ctx ended. It does not wait (room.go).
func (t *Transport) produce(ctx context.Context, recs []*kgo.Record, to reporter) {
	if err := ctx.Err(); err != nil {
		for i := range recs {
			to.Report(i, err)
		}
		return
	}
	promise := func(i int) func(*kgo.Record, error) {
		return func(r *kgo.Record, err error) {
			t.room.free()
			if err == nil {
				t.delivered(r.Topic)
				t.settleWriteConfirmed(r.Topic)
			}
			to.Report(i, err)
		}
	}
	uctx := context.WithoutCancel(ctx)
	switch {
	case t.room == nil:
		go func() {
			for i, r := range recs {
				t.produceUncancelled(ctx, r, promise(i))
			}
		}()
	case t.room.take(t.prod, len(recs)):
		for i, r := range recs {
			t.prod.Produce(uctx, r, promise(i))
		}
	default:
		go func() {
			for i, r := range recs {
				if err := t.room.wait(ctx); err != nil {
					to.Report(i, err)
					continue
				}
				t.prod.Produce(uctx, r, promise(i))
			}
		}()
	}
}

// produceUncancelled hands r to the producer with a context that ends with ctx only
// while Produce blocks on a full buffer: franz-go fails every record buffered behind a
// cancelled one, other callers' publishes included (docs/transports/kafka.md). The
// record's own context never ends, so that ctx ending just as r was buffered cannot fail
// it later. It reports whether ctx ended before Produce returned: r was then, but for
// that race, failed before it was buffered (promise gets ctx's error).
func (t *Transport) produceUncancelled(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) (ended bool) {
	if err := ctx.Err(); err != nil {
		promise(r, err)
		return true
	}
	if r.Context == nil {
		r.Context = context.WithoutCancel(ctx)
	}
	pctx, cancel := context.WithCancel(r.Context)
	stop := context.AfterFunc(ctx, cancel)
	t.prod.Produce(pctx, r, func(r *kgo.Record, err error) {
		if err != nil && pctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = ctx.Err() // the caller's reason: its deadline, say
		}
		promise(r, err)
	})
	return !stop()
}

// delivered notes a topic the transport wrote to; the first time, local consumers that
// consume it refresh their metadata so they see a topic that was just created.
func (t *Transport) delivered(topic string) {
	if _, seen := t.seen.Load(topic); seen {
		return // Load's key does not escape: no allocation per delivered record
	}
	if _, seen := t.seen.LoadOrStore(topic, struct{}{}); seen {
		return
	}
	var nudge []*consumer
	t.mu.Lock()
	for c := range t.live {
		if c.pattern.MatchString(topic) {
			nudge = append(nudge, c)
		}
	}
	t.mu.Unlock()
	for _, c := range nudge {
		c.cl.ForceMetadataRefresh()
	}
}

// checkTopic accepts what Kafka accepts as a topic name: 1 to 249 of [a-zA-Z0-9._-].
func checkTopic(name string) error {
	ok := len(name) >= 1 && len(name) <= 249
	for i := 0; ok && i < len(name); i++ {
		ch := name[i]
		ok = ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '_' || ch == '-'
	}
	if !ok {
		return fmt.Errorf("kafka: %q is not a valid topic name (1 to 249 of a-z, A-Z, 0-9, '.', '_', '-')", name)
	}
	return nil
}

// delayTopic names the topic a message delayed by d is parked on.
func delayTopic(queue string, d time.Duration) string {
	return queue + ".delay." + strconv.FormatInt(d.Milliseconds(), 10)
}

// recordAlloc holds a record and room for its headers, so that projecting a message
// takes one allocation for both.
type recordAlloc struct {
	rec kgo.Record
	hs  [8]kgo.RecordHeader
}

// record projects m onto a Kafka record that owns its bytes (one buffer for the value,
// key and header values; the value and key of a message handed over, m.Owned, are kept
// as they are). A delay counts from now (zero: time.Now()).
func (t *Transport) record(ctx context.Context, m *transport.Message, now time.Time) (*kgo.Record, error) {
	if m == nil {
		return nil, errors.New("kafka: nil message")
	}
	if err := checkTopic(m.Queue); err != nil {
		return nil, err
	}
	p := m.Projection
	topic := m.Queue
	delayed := m.Delay >= time.Millisecond
	if delayed {
		topic = delayTopic(m.Queue, m.Delay)
		if err := checkTopic(topic); err != nil {
			return nil, err
		}
		if now.IsZero() {
			now = time.Now()
		}
	}
	const intLen = 20 // room for a formatted int64
	size := len(p.URN) + len(p.TraceID) + len(p.MessageID) + len(p.Lang) + 2*intLen
	nh := 6
	if delayed {
		size += intLen + len(m.Queue)
		nh += 2
	}
	if !m.Owned {
		size += len(m.Body) + len(m.Key)
	}
	var keys []string
	if len(m.Headers) > 0 {
		keys = make([]string, 0, len(m.Headers))
		for k, v := range m.Headers {
			if !isReserved(k) {
				keys = append(keys, k)
				size += len(v)
			}
		}
		slices.Sort(keys)
		nh += len(keys)
	}

	// Each slice is a full slice expression of buf, so none can grow into the next.
	buf := make([]byte, 0, size)
	cut := func(from int) []byte { return buf[from:len(buf):len(buf)] }
	putString := func(s string) []byte {
		i := len(buf)
		buf = append(buf, s...)
		return cut(i)
	}
	putInt := func(n int64) []byte {
		i := len(buf)
		buf = strconv.AppendInt(buf, n, 10)
		return cut(i)
	}

	ra := &recordAlloc{}
	hs := ra.hs[:0]
	if nh > len(ra.hs) {
		hs = make([]kgo.RecordHeader, 0, nh)
	}
	add := func(k string, v []byte) { hs = append(hs, kgo.RecordHeader{Key: k, Value: v}) }
	if p.URN != "" {
		add(HeaderJob, putString(p.URN))
	}
	if p.TraceID != "" {
		add(HeaderTraceID, putString(p.TraceID))
	}
	if p.MessageID != "" {
		add(HeaderMessageID, putString(p.MessageID))
	}
	if p.SchemaVersion != 0 {
		add(HeaderSchemaVersion, putInt(int64(p.SchemaVersion)))
	}
	if p.Lang != "" {
		add(HeaderSourceLang, putString(p.Lang))
	}
	add(HeaderAttempts, putInt(int64(m.Attempts)))
	if delayed {
		add(HeaderDueAt, putInt(now.Add(m.Delay).UnixMilli()))
		add(HeaderOriginalTopic, putString(m.Queue))
	}
	for _, k := range keys {
		add(k, putString(m.Headers[k]))
	}

	rec := &ra.rec
	rec.Topic = topic
	rec.Headers = hs
	switch {
	case m.Owned && m.Body != nil:
		rec.Value = slices.Clip(m.Body) // handed over: kept, not copied
	case m.Owned:
		rec.Value = []byte{} // never nil: an empty body is an empty value, not a null one
	default:
		i := len(buf)
		buf = append(buf, m.Body...)
		rec.Value = cut(i)
	}
	switch {
	case m.Key == nil: // no key
	case m.Owned:
		rec.Key = slices.Clip(m.Key)
	default:
		i := len(buf)
		buf = append(buf, m.Key...)
		rec.Key = cut(i) // an empty key stays empty, not null
	}
	rec.Timestamp = t.timestamp(ctx, topic, p.CreatedAt, now) // timestamp.go
	if err := transport.CheckSize("kafka", m.Queue, batchSize(rec), int(t.limit.Load())); err != nil {
		return nil, err
	}
	return rec, nil
}

func (t *Transport) isClosed() bool { return t.shut.Load() }

// Close closes the consumers, flushes buffered publishes (until ctx ends), closes the
// producer the transport built, and returns what Flush does.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	first := t.shut.CompareAndSwap(false, true)
	t.mu.Unlock()
	if !first {
		return nil
	}
	errs := []error{t.consumers.Close(ctx), t.Flush(ctx)}
	t.stopBg()
	t.bgWG.Wait()
	if t.ownProd {
		t.prod.Close()
	}
	return errors.Join(errs...)
}

// Producer returns the producer client, for tools that need the raw client (kadm).
func (t *Transport) Producer() *kgo.Client { return t.prod }

// Group returns the consumer group the transport's consumers join.
func (t *Transport) Group() string { return t.cfg.group }

// DeliveryTimeout returns how long a settle write waits for its delivery report.
func (t *Transport) DeliveryTimeout() time.Duration { return t.cfg.deliveryTimeout }
