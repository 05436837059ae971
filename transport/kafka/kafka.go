// Package kafka is the Apache Kafka transport behind kafka:// URLs, built on franz-go.
//
// Import it for its side effect to make the scheme available to the runtime:
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/kafka"
//
// The URL is kafka://host:port[,host:port…] (the port defaults to 9092) with these
// optional query parameters:
//
//   - group: the consumer group (default "babelqueue").
//   - delivery_timeout: how long a settle write (and a confirmed publish) waits for its
//     delivery report, as a Go duration ("30s") or a number of seconds ("2.5"); default
//     30 s.
//   - session_timeout: how long the group waits for a member's heartbeat before it
//     gives the member's partitions to the others; default 10 s, so a worker killed
//     without leaving the group holds its partitions for 10 s at most (franz-go's own
//     default is 45 s). The broker bounds it (group.min.session.timeout.ms, 6 s by
//     default). A consumer that is closed leaves the group at once.
//   - heartbeat_interval: how often a consumer heartbeats; default 1 s, shorter than the
//     session timeout.
//   - dial_timeout: the bound on a connection attempt, and on [Open]'s check that a
//     broker answers; default 10 s.
//   - max_uncommitted: the most records a consumer hands out beyond its committed
//     offsets (default 5000), and max_uncommitted_time: how long it goes on handing out
//     records while its commits fail (default 2 s); see [WithMaxUncommitted].
//   - pipeline_settles: 0 makes Settle wait for the confirmation of the runtime's settle
//     writes and return their failure (default 1: pipelined; see below).
//   - confirm: 1 makes Publish wait for the broker's acknowledgement and return its
//     failure (default 0: fire-and-forget); see [WithConfirmedPublish].
//   - auto_create_topics: whether the transport creates the topics it writes to when
//     they are missing (true/false, 1/0; default true): its producer asks the broker to
//     auto-create them, and the dead-letter and delay topics a consumer's settle writes
//     need are created at Consume through the admin API. Off, such a topic that is
//     missing is an error from Consume ([MissingTopicError]).
//   - client_id: the Kafka client id (default "babelqueue-go").
//   - tls: 1 to dial with TLS (the system's roots unless tls_ca names a CA file).
//   - tls_ca, tls_cert and tls_key (mutual TLS), tls_server_name, tls_insecure: the
//     TLS parameters every scheme shares (docs/security.md); they need tls=1.
//     [WithTLSConfig] sets the *tls.Config in code instead.
//   - sasl: plain, scram-sha-256 or scram-sha-512, with the user and password taken from
//     the URL's user info (user info alone means plain). Amazon MSK and Confluent Cloud:
//     kafka://USER:PASSWORD@broker:9096?tls=1&sasl=scram-sha-512.
//
// Durations take a Go duration or a number of seconds; booleans 1/0, true/false,
// yes/no, on/off ([transport.Query]).
//
// For anything else (OAuth, a custom dialer) build the clients yourself and use [New]
// with a [ConsumerFactory].
//
// # Wire format
//
// A record's value is the envelope bytes, unchanged. The envelope is projected onto the
// record headers bq-job, bq-trace-id, bq-message-id, bq-schema-version, bq-source-lang and
// bq-attempts (all UTF-8 strings), and the record timestamp is meta.created_at. Out-of-band
// headers ride as further record headers. Keys are kept exactly: a nil key is a null key,
// an empty key is an empty key.
//
// On consume, the bq-attempts header is authoritative
// ([transport.AttemptsHeaderAuthoritative]) and bq-schema-version feeds the
// schema-version gate. When a header name repeats, the first occurrence wins.
//
// # Consuming
//
// Each consumer is one member of the consumer group, with auto-commit off. A record's
// offset is committed only once it and every record before it on its partition are
// settled, so several workers may settle out of order without an unsettled record being
// skipped. Commits are made in the background (coalesced), when partitions are revoked,
// and on Close; a crash between a settle and its commit redelivers the record
// (at-least-once: keep handlers idempotent). A consumer hands out at most
// max_uncommitted records beyond its committed offsets, and none while its commits have
// failed for max_uncommitted_time: while it cannot commit it stops instead of working
// ahead, so a crash or a lost session redelivers at most that window.
//
// A rewound delivery makes the next poll seek its partition back to it: the record and
// every record after it on that partition are delivered again, including records already
// acknowledged but not yet committable behind it. Deliveries superseded that way, or whose
// partition was revoked in a rebalance, cannot be settled any more: Settle returns
// [ErrRevoked] (which matches [transport.ErrAlreadySettled]) and makes no write, and the
// record is redelivered to whoever owns the partition. A seek for a partition that was
// revoked meanwhile is skipped and logged; it never blocks a rebalance.
//
// # Settle writes and Publish
//
// The runtime's settle writes (retry, release, dead letter) are pipelined by default:
// Settle hands them to the producer and returns, the record is committed only once
// every write is confirmed, and a write that fails or is not confirmed within the
// delivery timeout makes the transport rewind the record itself (logged with its
// cause): it is delivered again, nothing is lost, and no worker waits for its own
// write. With pipeline_settles=0 ([WithPipelinedSettles]) they wait for their own
// delivery report up to the delivery timeout; on an error or a timeout Settle returns a
// [transport.SettleWriteError] wrapping a [*DeliveryError] and commits nothing, and the
// runtime rewinds the delivery. Either way a failed write holds the record's partition
// back before the rewind takes effect: 250 ms
// after the first failure to a topic, doubling up to 10 s while writes to that topic keep
// failing, so a write that cannot succeed never spins the handler. A write that failed
// because its topic was deleted (UNKNOWN_TOPIC_ID: franz-go keeps the deleted topic's id)
// makes the producer forget the topic, so the next write finds it again, or creates it;
// one to a missing topic creates it (auto-creation on).
//
// The user's own Publish is fire-and-forget by default: the record is buffered and
// Publish returns. A record larger than the producer's ProducerBatchMaxBytes or the
// broker's message.max.bytes ([Transport.MaxRecordBytes]) is refused before it is
// buffered, with a [*transport.TooLargeError]. A buffered record the broker refuses is
// logged, and [Transport.Flush] and [Transport.Close] return it in an
// [*UndeliveredError]. With confirm=1 ([WithConfirmedPublish]) Publish waits for the
// broker and returns its failure itself.
//
// # Delays
//
// Kafka has no native delay. A message published with a delay is parked on the topic
// <queue>.delay.<ms> with the headers bq-due-at (Unix ms) and bq-original-topic. Every
// consumer of <queue> also consumes the delay topics of its queue (by pattern) and
// re-produces a parked record to <queue>, byte for byte and with its key and headers, once
// it is due; the parked record is committed only after that write is confirmed. The due
// time is clamped to at most one delay from when the record is read, so a producer whose
// clock runs ahead cannot park a record for longer. Topic names of the form
// <queue>.delay.<digits> are therefore reserved.
//
// # Transactional moves and read_committed
//
// A consumer opened with [transport.ConsumeOptions.Transactional] (a DLQ redrive's)
// settles every Ack with writes in one Kafka transaction that also commits the record's
// offset for the group, so a process killed mid-move leaves the message in exactly one
// of the two topics ([transport.SettlesAtomically] reports it); it hands out one record
// at a time. Every consumer, and [Transport.Browse], reads committed records only
// (read_committed): the write of an aborted transaction is never delivered, and one of a
// transaction still open is delivered once it commits.
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
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

// DefaultGroup is the consumer group used when none is configured.
const DefaultGroup = "babelqueue"

// DefaultDeliveryTimeout bounds the wait for a settle write's delivery report.
const DefaultDeliveryTimeout = 30 * time.Second

// DefaultSessionTimeout is how long the group waits for a member's heartbeat before it
// takes the member's partitions back, unless configured otherwise. It is short so that a
// worker that dies without leaving the group (SIGKILL, a lost host) holds its partitions
// for at most 10 s; franz-go's and librdkafka's own default is 45 s. It must lie within
// the broker's group.min.session.timeout.ms (6 s by default) and
// group.max.session.timeout.ms.
const DefaultSessionTimeout = 10 * time.Second

// DefaultHeartbeatInterval is how often a consumer heartbeats to its group, unless
// configured otherwise: a tenth of [DefaultSessionTimeout], so a session survives several
// lost heartbeats, and members learn of a rebalance within a second.
const DefaultHeartbeatInterval = time.Second

// DefaultDialTimeout bounds a connection attempt to a broker, and the check at [Open]
// that a broker answers.
const DefaultDialTimeout = 10 * time.Second

// ErrDelivery matches every [DeliveryError].
var ErrDelivery = errors.New("kafka: delivery not confirmed")

// ErrRevoked is returned by Settle for a delivery that can no longer be settled because
// its partition was revoked in a rebalance, or because an earlier record of its partition
// was rewound: the record will be delivered again. It matches
// [transport.ErrAlreadySettled].
var ErrRevoked = fmt.Errorf("kafka: partition revoked or rewound before the delivery was settled; it will be redelivered: %w", transport.ErrAlreadySettled)

// DeliveryError reports a settle write the broker did not confirm within the delivery
// timeout, or confirmed with an error. Settle returns it wrapped in a
// [transport.SettleWriteError]; it matches [ErrDelivery].
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

// ConsumerFactory builds the group-consuming client of one consumer. The transport passes
// the options it needs (group, topics, callbacks, offsets); a factory adds its own
// (seeds, TLS, SASL) and must not override those. See [Factory].
type ConsumerFactory func(opts ...kgo.Opt) (*kgo.Client, error)

// Factory returns a [ConsumerFactory] that builds clients from base (seed brokers, TLS,
// SASL, …) followed by the transport's options.
func Factory(base ...kgo.Opt) ConsumerFactory {
	return func(opts ...kgo.Opt) (*kgo.Client, error) {
		all := append(slices.Clip(base), opts...)
		return kgo.NewClient(all...)
	}
}

type config struct {
	group              string
	deliveryTimeout    time.Duration
	autoCreate         bool
	logger             *slog.Logger
	metadataMaxAge     time.Duration
	buffer             int
	commitInterval     time.Duration
	maxUncommitted     int
	maxUncommittedTime time.Duration
	sessionTimeout     time.Duration
	heartbeatInterval  time.Duration
	dialTimeout        time.Duration
	confirmPublish     bool
	pipelineSettles    bool
	// txTimeout is the transaction timeout of a transactional consumer's producer
	// (move.go); tests shorten it.
	txTimeout time.Duration
	tlsConfig *tls.Config // WithTLSConfig (secure.go)
}

// Option configures a [Transport]. A value an option cannot use makes [Open], [OpenURL]
// and [New] fail with a [*driverkit.OptionError] naming the option, which matches
// babelqueue.ErrInvalidOption.
type Option func(*config)

// WithGroup sets the consumer group (default [DefaultGroup]).
func WithGroup(group string) Option { return func(c *config) { c.group = group } }

// WithDeliveryTimeout sets how long a settle write waits for its delivery report
// (default [DefaultDeliveryTimeout]).
func WithDeliveryTimeout(d time.Duration) Option {
	return func(c *config) { c.deliveryTimeout = d }
}

// WithAutoCreateTopics sets whether the transport creates the topics it writes to when
// they are missing (default true): the producer that [Open] builds asks the broker to
// auto-create a topic it produces to, and, with [Open] or [New], the dead-letter and
// delay topics a consumer's settle writes need ([transport.ConsumeOptions]) are created
// at Consume through the admin API, with the broker's default partitions and
// replication, as is a settle-write topic found missing later. Off, a missing topic of
// that kind is an error from Consume ([ErrMissingTopic]).
func WithAutoCreateTopics(on bool) Option { return func(c *config) { c.autoCreate = on } }

// WithLogger sets the logger (default: the logger of [transport.LoggerFrom] for a
// transport opened by [transport.Open], else slog.Default()). franz-go's own log lines
// (warnings and errors) go to it too, for the clients the transport builds.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithSessionTimeout sets how long the consumer group waits for a member's heartbeat
// before it gives the member's partitions to the others (default
// [DefaultSessionTimeout]). A consumer that is closed leaves the group at once; this
// bounds how long a crashed one holds its partitions.
func WithSessionTimeout(d time.Duration) Option {
	return func(c *config) { c.sessionTimeout = d }
}

// WithHeartbeatInterval sets how often a consumer heartbeats to its group (default
// [DefaultHeartbeatInterval]); it must be shorter than the session timeout.
func WithHeartbeatInterval(d time.Duration) Option {
	return func(c *config) { c.heartbeatInterval = d }
}

// WithDialTimeout bounds a connection attempt to a broker (default
// [DefaultDialTimeout]); [Open] fails when no broker answers within it.
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

// WithPipelinedSettles sets whether the runtime's settle writes (retry, release, dead
// letter) are pipelined (default true). Pipelined, Settle hands the writes to the
// producer and returns at once; the record is committed only once every write is
// confirmed, and a write that fails or is not confirmed within the delivery timeout
// rewinds the record from inside the transport (logged with its cause), so it is
// delivered again: nothing is lost, and a worker never waits for its own write. Not
// pipelined, Settle waits for the confirmations and returns a failed write as a
// [transport.SettleWriteError] (the runtime then rewinds the delivery), which costs the
// worker the producer's linger and a round trip per write.
func WithPipelinedSettles(on bool) Option { return func(c *config) { c.pipelineSettles = on } }

// WithConfirmedPublish makes [Transport.Publish] wait until the broker acknowledged the
// record, up to the delivery timeout, and return its failure (default false:
// fire-and-forget). [Transport.Capabilities] then reports PublishConfirmed.
func WithConfirmedPublish(on bool) Option { return func(c *config) { c.confirmPublish = on } }

// WithMetadataRefresh sets how often a consumer looks for new delay topics of its queue
// created by other processes (default 10 s, at least 1 s).
func WithMetadataRefresh(d time.Duration) Option {
	return func(c *config) { c.metadataMaxAge = d }
}

// WithBuffer sets how many fetched records a consumer aims to hold ready beyond those
// handed out (default 1024): it polls again once fewer than half that many are ready.
// A poll takes everything franz-go has fetched (whole fetch responses, bounded by
// franz-go's fetch size options), so that franz-go fetches the next response while
// these records are handled; the records held can therefore exceed n by up to one
// fetch.
func WithBuffer(n int) Option { return func(c *config) { c.buffer = n } }

// WithCommitInterval sets the shortest pause between two background offset commits
// (default 100 ms); settles made meanwhile are committed together. Revokes and Close
// always commit at once. A crash redelivers at most what was settled since the last
// commit.
func WithCommitInterval(d time.Duration) Option {
	return func(c *config) { c.commitInterval = d }
}

// The defaults of the bound on what a consumer handles ahead of its commits
// ([WithMaxUncommitted], [WithMaxUncommittedTime]).
const (
	DefaultMaxUncommitted     = 5000
	DefaultMaxUncommittedTime = 2 * time.Second
)

// WithMaxUncommitted bounds the records a consumer hands out beyond its group's
// committed offsets (default [DefaultMaxUncommitted]; at least 1): a crash, or a network
// fault that costs the consumer its partitions, delivers at most that many records
// again (plus the parked records its delay loop was moving). Once that many are handed
// out and not committed, Receive waits until a commit moves the window (or a rewind or
// a revoke shrinks it): while commits fail the consumer stops taking records from its
// buffer instead of working ahead. Records count from the partition's committed offset
// to the last one handed out (by offset), so a record settled behind one a handler
// still holds counts until that one is settled too; a commit is made at once, without
// the commit interval's pause, once half the window is used.
func WithMaxUncommitted(n int) Option { return func(c *config) { c.maxUncommitted = n } }

// WithMaxUncommittedTime bounds how long a consumer goes on handing out records while a
// commit fails or does not answer (default [DefaultMaxUncommittedTime]): once the oldest
// commit attempt that has not succeeded began that long ago, Receive waits until one
// succeeds. Failed commits are tried again after a backoff (250 ms doubling to 2 s).
func WithMaxUncommittedTime(d time.Duration) Option {
	return func(c *config) { c.maxUncommittedTime = d }
}

func defaults() config {
	return config{
		group:              DefaultGroup,
		deliveryTimeout:    DefaultDeliveryTimeout,
		autoCreate:         true,
		metadataMaxAge:     10 * time.Second,
		buffer:             1024,
		commitInterval:     100 * time.Millisecond,
		maxUncommitted:     DefaultMaxUncommitted,
		maxUncommittedTime: DefaultMaxUncommittedTime,
		sessionTimeout:     DefaultSessionTimeout,
		heartbeatInterval:  DefaultHeartbeatInterval,
		dialTimeout:        DefaultDialTimeout,
		pipelineSettles:    true,
		txTimeout:          defaultTxTimeout,
	}
}

// check refuses the option values the transport cannot use: each is a
// [*driverkit.OptionError] naming the option, matching babelqueue.ErrInvalidOption.
func (cfg *config) check() error {
	bad := driverkit.Options{Broker: "kafka"}
	if cfg.group == "" {
		bad.Invalid("WithGroup", "the consumer group name is empty")
	}
	if cfg.deliveryTimeout <= 0 {
		bad.Invalid("WithDeliveryTimeout", "want a duration above zero, got %s", cfg.deliveryTimeout)
	}
	if cfg.sessionTimeout < time.Second {
		bad.Invalid("WithSessionTimeout", "want at least 1s, got %s", cfg.sessionTimeout)
	}
	if cfg.heartbeatInterval <= 0 || cfg.heartbeatInterval >= cfg.sessionTimeout {
		bad.Invalid("WithHeartbeatInterval", "want a duration above zero and shorter than the session timeout (%s), got %s", cfg.sessionTimeout, cfg.heartbeatInterval)
	}
	if cfg.dialTimeout <= 0 {
		bad.Invalid("WithDialTimeout", "want a duration above zero, got %s", cfg.dialTimeout)
	}
	if cfg.metadataMaxAge < time.Second {
		bad.Invalid("WithMetadataRefresh", "want at least 1s, got %s", cfg.metadataMaxAge)
	}
	if cfg.buffer < 1 {
		bad.Invalid("WithBuffer", "want at least 1 record, got %d", cfg.buffer)
	}
	if cfg.commitInterval < 0 {
		bad.Invalid("WithCommitInterval", "want a duration of zero or more, got %s", cfg.commitInterval)
	}
	if cfg.maxUncommitted < 1 {
		bad.Invalid("WithMaxUncommitted", "want at least 1 record, got %d", cfg.maxUncommitted)
	}
	if cfg.maxUncommittedTime <= 0 {
		bad.Invalid("WithMaxUncommittedTime", "want a duration above zero, got %s", cfg.maxUncommittedTime)
	}
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

	mu     sync.Mutex
	closed bool
	live   map[*consumer]struct{} // the consumers open, for delivered
	known  map[string]bool        // topics this transport has written to successfully
	seen   sync.Map               // lock-free copy of known, for the delivery callbacks
	shut   atomic.Bool            // closed, for the publish fast path

	onPublished func(*kgo.Record, error) // t.published, bound once
	room        *producerRoom            // admission into prod's buffer (room.go); nil: none kept

	limit atomic.Int64 // the largest record batch the producer and the broker accept

	failMu      sync.Mutex
	failCount   int              // publishes not delivered since the last Flush or Close
	failReports []*DeliveryError // the first maxReported of them

	streaks  sync.Map // topic → *streak: settle writes failed in a row
	repairMu sync.Mutex
	repaired map[string]time.Time // when a topic's metadata was last repaired

	bg       context.Context // background work: the broker limit lookup of New, hurry
	stopBg   context.CancelFunc
	bgWG     sync.WaitGroup
	hurrying atomic.Bool // a hurry's flush is under way
}

var _ transport.Transport = (*Transport)(nil)

// New builds a transport around a producer client and a factory for consumer clients,
// for setups the URL cannot express (mutual TLS, OAuth, custom dialers). The producer
// stays yours: Close flushes it but does not close it. factory may be nil when the
// transport only publishes. The broker's message.max.bytes is read in the background;
// until it is known, the producer's ProducerBatchMaxBytes alone bounds a record.
func New(producer *kgo.Client, factory ConsumerFactory, opts ...Option) (*Transport, error) {
	if producer == nil {
		return nil, errors.New("kafka: New needs a producer client")
	}
	t, err := newTransport(producer, false, factory, opts...)
	if err != nil {
		return nil, err
	}
	t.bgWG.Add(1)
	go func() {
		defer t.bgWG.Done()
		ctx, cancel := context.WithTimeout(t.bg, t.cfg.dialTimeout)
		defer cancel()
		if err := t.loadLimit(ctx); err != nil && t.bg.Err() == nil {
			t.log.Warn("kafka: cannot read the broker's message.max.bytes; the producer's ProducerBatchMaxBytes alone bounds a record", "limit", t.limit.Load(), "err", err)
		}
	}()
	return t, nil
}

func newTransport(producer *kgo.Client, own bool, factory ConsumerFactory, opts ...Option) (*Transport, error) {
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	log := cfg.logger
	if log == nil {
		log = slog.Default()
	}
	t := &Transport{
		prod:     producer,
		ownProd:  own,
		factory:  factory,
		cfg:      cfg,
		log:      log.With("transport", "kafka"),
		live:     map[*consumer]struct{}{},
		known:    map[string]bool{},
		repaired: map[string]time.Time{},
	}
	t.onPublished = t.published
	t.room = newProducerRoom(producer)
	t.limit.Store(int64(producerLimit(producer)))
	t.bg, t.stopBg = context.WithCancel(context.Background())
	return t, nil
}

// Capabilities reports the Kafka binding: the bq-attempts header is authoritative,
// delays go through delay topics, poison with the DLQ off needs retry tiers, the
// schema-version gate applies and the dead-letter suffix is ".dlq".
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

// Publish buffers one record and returns without waiting for the broker
// (fire-and-forget), unless the transport confirms its publishes
// ([WithConfirmedPublish], ?confirm=1): then it waits for the broker's acknowledgement,
// up to the delivery timeout, and returns a [*DeliveryError] when there is none. A
// record larger than the producer or the broker accepts is refused before it is
// buffered, with a [*transport.TooLargeError] naming the limit. A fire-and-forget
// record the broker refuses later is logged and reported by the next [Transport.Flush]
// or [Transport.Close]. Publish keeps no reference to m. It blocks only while the
// producer's buffer is full, until ctx ends: it then returns ctx's error and the record
// is not buffered.
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	if t.cfg.confirmPublish {
		return t.publishConfirmedOne(ctx, m)
	}
	rec, err := t.record(m, time.Time{})
	if err != nil {
		return err
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

// publishConfirmedOne is Publish with ?confirm=1: the record's own delivery report,
// awaited.
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
			t.bgWG.Add(1)
			go func() {
				defer t.bgWG.Done()
				t.repair(t.bg, r.Topic, err)
			}()
		}
		return
	}
	t.delivered(r.Topic)
}

// maxReported bounds the failed publishes an [UndeliveredError] lists.
const maxReported = 16

// UndeliveredError reports fire-and-forget publishes ([Transport.Publish]) that were not
// delivered: the broker refused them, or the producer gave up on them. [Transport.Flush]
// and [Transport.Close] return it for the publishes that failed since the last of
// those calls. It matches [ErrDelivery]; Unwrap returns the listed DeliveryErrors.
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
// returns an [*UndeliveredError] for the fire-and-forget publishes that were not
// delivered since the last Flush or Close.
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
	type result struct {
		i   int
		err error
	}
	done := make(chan result, len(recs))
	t.produce(ctx, recs, func(i int, err error) { done <- result{i, err} })
	// A write awaited for its acknowledgement does not wait out the producer's linger:
	// a Flush sends what is buffered at once and keeps new records from lingering until
	// it returns, which is once these records are acknowledged (hurried is called then).
	hctx, hurried := context.WithCancel(ctx)
	defer hurried()
	go func() { _ = t.prod.Flush(hctx) }()
	got := make([]bool, len(recs))
	for range recs {
		select {
		case res := <-done:
			got[res.i] = true
			if res.err != nil {
				errs[res.i] = &DeliveryError{Topic: recs[res.i].Topic, Err: res.err}
			}
		case <-ctx.Done():
			for i := range recs {
				if !got[i] {
					errs[i] = &DeliveryError{Topic: recs[i].Topic, Err: ctx.Err()}
				}
			}
			return errs
		}
	}
	return errs
}

// produce hands recs to the producer, in order, and calls report once for each: from
// its delivery promise, or with ctx's error for a record that found no room in the
// producer's buffer before ctx ended (it is not handed over). It does not wait: the
// records go into the producer's buffer at once when there is room for all of them
// (producerRoom), with ctx's values but not its cancellation (see produceUncancelled),
// and otherwise wait for room, in order, on a goroutine of their own. (A producer that
// also bounds its buffer in bytes keeps no room: the records are handed over one at a
// time with produceUncancelled, on a goroutine of their own.)
func (t *Transport) produce(ctx context.Context, recs []*kgo.Record, report func(i int, err error)) {
	if err := ctx.Err(); err != nil {
		for i := range recs {
			report(i, err)
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
			report(i, err)
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
					report(i, err)
					continue
				}
				t.prod.Produce(uctx, r, promise(i))
			}
		}()
	}
}

// produceUncancelled hands r to the producer with a context that ends with ctx only
// while Produce blocks on a full buffer. Once buffered, the record is never cancelled:
// franz-go fails every record buffered behind a cancelled one in the same partition
// (to keep the partition gapless), and those include the fire-and-forget publishes of
// other callers, which would then be lost during a broker outage. A settle write whose
// wait ends at the delivery timeout therefore stays buffered and may still be written
// later: its record is redelivered meanwhile, so the outcome is a duplicate, never a loss.
// A record whose ctx has already ended is not handed over at all (franz-go would buffer it
// with its ended context when there is room).
func (t *Transport) produceUncancelled(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	if err := ctx.Err(); err != nil {
		promise(r, err)
		return
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	t.prod.Produce(pctx, r, promise)
	stop()
}

// delivered notes a topic the transport wrote to; the first time, local consumers that
// consume it refresh their metadata so they see a topic that was just created.
func (t *Transport) delivered(topic string) {
	if _, seen := t.seen.Load(topic); seen {
		return
	}
	t.seen.Store(topic, struct{}{})
	t.mu.Lock()
	if t.known[topic] {
		t.mu.Unlock()
		return
	}
	t.known[topic] = true
	var nudge []*consumer
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

// record projects m onto a Kafka record. The record owns its bytes: the value, the key
// and every header value are copied into one buffer, so the caller may reuse m's
// buffers as soon as record returns. now is the time a delay counts from; the zero time
// means time.Now(). A record whose batch would exceed the transport's limit is a
// *transport.TooLargeError.
func (t *Transport) record(m *transport.Message, now time.Time) (*kgo.Record, error) {
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
	size := len(m.Body) + len(m.Key) + len(p.URN) + len(p.TraceID) + len(p.MessageID) + len(p.Lang) + 2*intLen
	nh := 6
	if delayed {
		size += intLen + len(m.Queue)
		nh += 2
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

	// Every byte slice the record holds is a full slice expression of buf, so none can
	// grow into the next. Should buf be outgrown, append moves it and the slices taken
	// so far keep the old array: correct, only one allocation more.
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
	i := len(buf)
	buf = append(buf, m.Body...)
	rec.Value = cut(i) // never nil: an empty body is an empty value, not a null one
	if m.Key != nil {
		i = len(buf)
		buf = append(buf, m.Key...)
		rec.Key = cut(i) // an empty key stays empty, not null
	}
	if p.CreatedAt > 0 {
		rec.Timestamp = time.UnixMilli(p.CreatedAt)
	}
	if err := transport.CheckSize("kafka", m.Queue, batchSize(rec), int(t.limit.Load())); err != nil {
		return nil, err
	}
	return rec, nil
}

func (t *Transport) isClosed() bool { return t.shut.Load() }

// Close closes every consumer of the transport, then flushes buffered publishes (until
// ctx ends) and, when the transport built the producer, closes it. Like
// [Transport.Flush] it returns an [*UndeliveredError] for the fire-and-forget publishes
// the broker refused or that could not be delivered.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.shut.Store(true)
	t.mu.Unlock()
	errs := []error{t.consumers.Close(ctx), t.Flush(ctx)}
	t.stopBg()
	t.bgWG.Wait()
	if t.ownProd {
		t.prod.Close()
	}
	return errors.Join(errs...)
}

// Producer returns the producer client, for tools that need the raw client (an admin
// client built with kadm.NewClient, for example).
func (t *Transport) Producer() *kgo.Client { return t.prod }

// Group returns the consumer group the transport's consumers join.
func (t *Transport) Group() string { return t.cfg.group }

// DeliveryTimeout returns how long a settle write waits for its delivery report.
func (t *Transport) DeliveryTimeout() time.Duration { return t.cfg.deliveryTimeout }
