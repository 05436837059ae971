package pulsar

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	pc "github.com/apache/pulsar-client-go/pulsar"
	pclog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

func init() {
	transport.Register("pulsar", openURL)
	transport.Register("pulsar+ssl", openURL)
}

func openURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	return OpenURL(ctx, u)
}

// DefaultSubscription is the subscription name used when the URL names none.
const DefaultSubscription = "babelqueue"

// SubscriptionType is the Pulsar subscription type consumers attach with.
type SubscriptionType string

// The subscription types a pulsar:// URL accepts in its subscription_type parameter.
const (
	// Shared hands messages to the subscription's consumers round-robin (the default).
	Shared SubscriptionType = "shared"
	// Exclusive admits one consumer on the subscription.
	Exclusive SubscriptionType = "exclusive"
	// Failover admits several consumers, one active at a time.
	Failover SubscriptionType = "failover"
	// KeyShared spreads messages over consumers by key, in order per key.
	KeyShared SubscriptionType = "key_shared"
)

var nativeTypes = map[SubscriptionType]pc.SubscriptionType{Shared: pc.Shared, "": pc.Shared, Exclusive: pc.Exclusive, Failover: pc.Failover, KeyShared: pc.KeyShared}

func (s SubscriptionType) native() (pc.SubscriptionType, bool) {
	t, ok := nativeTypes[s]
	return t, ok
}

// delays reports whether the broker honours DeliverAfter on this subscription type.
func (s SubscriptionType) delays() bool { return s == Shared || s == KeyShared || s == "" }

// Option configures a [Transport]. A value an option cannot use is an error of [New] and
// [OpenURL] naming the option and matching babelqueue.ErrInvalidOption.
type Option func(*options)

type options struct {
	driverkit.Common // logger, connect timeout, max message size
	subscription     string
	subType          SubscriptionType
	nackDelay        time.Duration
	sendTimeout      time.Duration
	receiverQueue    int
	batching         bool
	closeClient      bool
	producerOptions  func(*pc.ProducerOptions)
	consumerOptions  func(*pc.ConsumerOptions)
	adminURL         string // the admin REST API, for Browse (browse.go)
	pipeline         bool   // pipelined settlements (WithPipelinedSettles)
	secure           access // TLS and token for the broker and the admin API (secure.go)
}

// WithLogger sets the logger of the transport and of the client [OpenURL] builds
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.SetLogger(l) } }

// WithSubscription sets the subscription name consumers attach with (default
// [DefaultSubscription]; subscription in the URL).
func WithSubscription(name string) Option {
	return func(o *options) {
		if name == "" {
			o.Invalid("WithSubscription", "want a subscription name, got an empty one")
			return
		}
		o.subscription = name
	}
}

// WithSubscriptionType sets the subscription type (default [Shared]; subscription_type
// in the URL).
func WithSubscriptionType(t SubscriptionType) Option {
	return func(o *options) {
		if _, ok := t.native(); !ok {
			o.Invalid("WithSubscriptionType", "unknown subscription type %q (want shared, exclusive, failover or key_shared)", string(t))
			return
		}
		o.subType = t
	}
}

// WithNackRedeliveryDelay sets how long Pulsar waits before it redelivers a rewound
// delivery (default 1s; nack_delay in the URL).
func WithNackRedeliveryDelay(d time.Duration) Option {
	return func(o *options) { o.SetAtLeast("WithNackRedeliveryDelay", &o.nackDelay, d, 1) }
}

// WithSendTimeout bounds the wait for the broker to confirm a write when the caller's
// context has no deadline, and for a pipelined settlement's confirmations (default 30s;
// send_timeout in the URL).
func WithSendTimeout(d time.Duration) Option {
	return func(o *options) { o.SetAtLeast("WithSendTimeout", &o.sendTimeout, d, 1) }
}

// WithConnectTimeout bounds how long [OpenURL] waits for the broker, and the client it
// builds for each new connection (default [DefaultConnectTimeout]; connect_timeout in
// the URL); [New] ignores it.
func WithConnectTimeout(d time.Duration) Option { return func(o *options) { o.SetConnectTimeout(d) } }

// WithReceiverQueueSize sets how many messages the Pulsar client fetches ahead of the
// workers (default [DefaultReceiverQueueSize]; receiver_queue in the URL), independent
// of the runtime's prefetch.
func WithReceiverQueueSize(n int) Option {
	return func(o *options) { o.SetAtLeastN("WithReceiverQueueSize", &o.receiverQueue, n, 1) }
}

// WithMaxMessageSize tells the transport the broker's maxMessageSize in bytes (default
// [DefaultMaxMessageSize]; max_message_size in the URL): a write whose body, properties
// and key are larger than that less [MetadataReserve] fails with [transport.ErrTooLarge].
func WithMaxMessageSize(n int) Option { return func(o *options) { o.SetMaxMessageSize(n) } }

// WithBatching turns on the Pulsar producer's batching (off by default, so that a
// single send does not wait for a batch to fill).
func WithBatching(on bool) Option { return func(o *options) { o.batching = on } }

// WithPipelinedSettles sets whether settlements are pipelined (default true;
// pipeline_settles in the URL): Settle of an Ack returns once its writes, or its
// acknowledgement, are handed over, and the delivery is acknowledged once the broker
// confirmed them, or rewound. Not pipelined, Settle waits for the broker's answers.
func WithPipelinedSettles(on bool) Option { return func(o *options) { o.pipeline = on } }

// WithProducerOptions lets fn adjust the options every producer is created with, after
// the transport set the topic and its own defaults.
func WithProducerOptions(fn func(*pc.ProducerOptions)) Option {
	return func(o *options) { o.producerOptions = fn }
}

// WithConsumerOptions lets fn adjust the options every consumer subscribes with, after
// the transport set the topic, the subscription and its own defaults.
func WithConsumerOptions(fn func(*pc.ConsumerOptions)) Option {
	return func(o *options) { o.consumerOptions = fn }
}

// WithCloseClient makes [Transport.Close] close the client given to [New] as well. A
// transport opened from a URL always closes the client it built.
func WithCloseClient() Option { return func(o *options) { o.closeClient = true } }

// Defaults of the options that bound the transport's waits and writes.
const (
	DefaultConnectTimeout    = 10 * time.Second // the wait for a connection to the broker
	DefaultMaxMessageSize    = 5 << 20          // the broker's default maxMessageSize (5 MiB)
	MetadataReserve          = 512              // the part of maxMessageSize left for what the client adds to every message
	DefaultReceiverQueueSize = 1000             // [WithReceiverQueueSize]
)

func buildOptions(opts []Option) (options, error) {
	o := options{
		Common:        driverkit.NewCommon("pulsar", DefaultConnectTimeout, DefaultMaxMessageSize, 0),
		subscription:  DefaultSubscription,
		subType:       Shared,
		nackDelay:     time.Second,
		sendTimeout:   30 * time.Second,
		receiverQueue: DefaultReceiverQueueSize,
		pipeline:      true,
	}
	o.MinMessageSize = MetadataReserve + 1
	for _, f := range opts {
		f(&o)
	}
	return o, o.Err()
}

// Config is what a pulsar:// URL says, parsed by [ParseURL]: each field is the URL
// parameter named beside it (see the option function of the same setting), zero when
// not given.
type Config struct {
	ServiceURL        string           // pulsar://host:port[,host:port…] or pulsar+ssl://…, without the query
	Subscription      string           // subscription
	SubscriptionType  SubscriptionType // subscription_type
	ConnectTimeout    time.Duration    // connect_timeout
	SendTimeout       time.Duration    // send_timeout
	NackDelay         time.Duration    // nack_delay
	MaxMessageSize    int              // max_message_size, in bytes
	ReceiverQueueSize int              // receiver_queue
	AdminURL          string           // admin: the admin REST API ([WithAdminURL])
	PipelineSettles   bool             // pipeline_settles: true unless it is 0
	TLS               *tls.Config      // the shared TLS parameters of pulsar+ssl:// (docs/security.md); nil for pulsar://
	Token, TokenFile  string           // token, token_file: the JWT itself or the file holding it
}

// urlParams are the query parameters a pulsar:// URL accepts.
var urlParams = []string{"subscription", "subscription_type", "connect_timeout", "send_timeout", "nack_delay", "max_message_size",
	"receiver_queue", "admin", "pipeline_settles", "token", "token_file"}

// options returns the option the URL's parameters stand for (ParseURL checked them).
func (c Config) options() []Option {
	return []Option{func(o *options) {
		o.subscription, o.subType, o.pipeline = c.Subscription, c.SubscriptionType, c.PipelineSettles
		o.secure = access{tls: c.TLS, token: c.Token, tokenFile: c.TokenFile}
		o.ConnectTimeout, o.sendTimeout = cmp.Or(c.ConnectTimeout, o.ConnectTimeout), cmp.Or(c.SendTimeout, o.sendTimeout)
		o.nackDelay, o.MaxMessageSize = cmp.Or(c.NackDelay, o.nackDelay), cmp.Or(c.MaxMessageSize, o.MaxMessageSize)
		o.receiverQueue, o.adminURL = cmp.Or(c.ReceiverQueueSize, o.receiverQueue), cmp.Or(c.AdminURL, o.adminURL)
	}}
}

// ParseURL reads a pulsar:// or pulsar+ssl:// URL. Errors match [transport.ErrBadURL]
// and name the part at fault; a bad parameter's also matches
// [transport.ErrInvalidOption].
func ParseURL(u *url.URL) (Config, error) {
	scheme := strings.ToLower(u.Scheme)
	bad := func(param, reason string) (Config, error) {
		return Config{}, &transport.BadURLError{Scheme: scheme, Param: param, Reason: reason}
	}
	defPort := "6650"
	switch scheme {
	case "pulsar":
	case "pulsar+ssl":
		defPort = "6651"
	default:
		return bad("scheme", "want pulsar:// or pulsar+ssl://")
	}
	if err := driverkit.RefuseParts(scheme, u,
		driverkit.URLPart{Part: "opaque", Param: "host", Reason: "want pulsar://host:port"},
		driverkit.URLPart{Part: "user", Param: "user", Reason: "pulsar:// URLs carry no user: give token_file= (or token=) for token authentication, or build a client and use pulsar.New"}); err != nil {
		return Config{}, err
	}
	q, err := driverkit.ParseQuery("pulsar", u, append(append([]string(nil), urlParams...), transport.TLSParams...)...)
	if err != nil {
		return Config{}, err
	}
	if err := driverkit.RefuseParts(scheme, u,
		driverkit.URLPart{Part: "path", Param: "path", Reason: "pulsar:// takes no path (topics are named by the queue)"},
		driverkit.URLPart{Part: "fragment", Param: "fragment", Reason: "pulsar:// takes no fragment"}); err != nil {
		return Config{}, err
	}
	if u.Host == "" {
		return bad("host", "missing (want pulsar://host:port)")
	}
	hosts, err := driverkit.Hosts(u, defPort)
	if errors.Is(err, driverkit.ErrBadPort) {
		return bad("port", err.Error())
	} else if err != nil {
		return bad("host", err.Error()+" (want host[:port][,host[:port]…])")
	}
	c := Config{
		ServiceURL:       scheme + "://" + strings.Join(hosts, ","),
		Subscription:     DefaultSubscription,
		SubscriptionType: Shared,
		PipelineSettles:  true,
	}
	if v, ok := q.String("subscription_type"); ok {
		st := SubscriptionType(strings.ToLower(v))
		if _, ok := st.native(); !ok || st == "" {
			return Config{}, q.Bad("subscription_type", "want shared, exclusive, failover or key_shared")
		}
		c.SubscriptionType = st
	}
	sets, err := driverkit.Params[func()]{
		{Name: "subscription", String: driverkit.Into(&c.Subscription)},
		{Name: "connect_timeout", Duration: driverkit.Into(&c.ConnectTimeout), Lo: 10 * time.Millisecond, Hi: 10 * time.Minute},
		{Name: "send_timeout", Duration: driverkit.Into(&c.SendTimeout), Lo: 10 * time.Millisecond, Hi: time.Hour},
		{Name: "nack_delay", Duration: driverkit.Into(&c.NackDelay), Lo: time.Millisecond, Hi: 24 * time.Hour},
		{Name: "max_message_size", Int: driverkit.Into(&c.MaxMessageSize), Min: MetadataReserve + 1, Max: math.MaxInt32},
		{Name: "receiver_queue", Int: driverkit.Into(&c.ReceiverQueueSize), Min: 1, Max: math.MaxInt32},
		{Name: "admin", String: driverkit.Into(&c.AdminURL), Check: checkAdminURL},
		{Name: "pipeline_settles", Bool: driverkit.Into(&c.PipelineSettles)},
		{Name: "token", String: driverkit.Into(&c.Token)},
		{Name: "token_file", String: driverkit.Into(&c.TokenFile)},
	}.Read(q)
	if err != nil {
		return Config{}, err
	}
	for _, set := range sets {
		set()
	}
	c.AdminURL = strings.TrimRight(c.AdminURL, "/")
	if c.TLS, err = q.TLS(scheme == "pulsar+ssl", nil); err != nil {
		return Config{}, err
	}
	if c.Token != "" && c.TokenFile != "" {
		return Config{}, q.Bad("token", "give token or token_file, not both")
	}
	return c, nil
}

// checkAdminURL returns why an admin= value is not the admin REST API's URL, or "".
func checkAdminURL(v string) string {
	if driverkit.CheckHTTPURL(v) != "" {
		return "want the admin REST API's http(s)://host:port, without credentials"
	}
	return ""
}

// OpenURL builds a transport from a pulsar:// or pulsar+ssl:// URL; opts are applied
// after the URL's parameters, and the logger defaults to ctx's ([transport.LoggerFrom]).
// It fails with [ErrUnreachable] when no broker of the URL answers within the connect
// timeout. [Transport.Close] closes the client it builds.
func OpenURL(ctx context.Context, u *url.URL, opts ...Option) (*Transport, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	all := append([]Option{WithLogger(transport.LoggerFrom(ctx)), WithAdminURL(defaultAdminURL(cfg.ServiceURL))}, cfg.options()...)
	o, err := buildOptions(append(all, opts...))
	if err != nil {
		return nil, err
	}
	redacted := transport.RedactURL(u)
	transport.WarnInsecureTLS(o.Logger, "pulsar", redacted, o.secure.tls)
	if err := probe(ctx, cfg.ServiceURL, o.ConnectTimeout, o.secure.tls); err != nil {
		return nil, transport.OpenFailed("pulsar", redacted, err)
	}
	refused := make(chan string, 1)
	copts := pc.ClientOptions{
		URL:               cfg.ServiceURL,
		Logger:            pclog.NewLoggerWithSlog(slog.New(clientLog(o.Logger.Handler(), refused)).With("component", "pulsar-client")),
		OperationTimeout:  30 * time.Second,
		ConnectionTimeout: o.ConnectTimeout,
		KeepAliveInterval: KeepAliveInterval,
		TLSConfig:         o.secure.tls,
	}
	if copts.Authentication, err = o.secure.authentication(); err != nil {
		return nil, transport.OpenFailed("pulsar", redacted, err)
	}
	client, err := pc.NewClient(copts)
	if err != nil {
		return nil, fmt.Errorf("pulsar: client for %s: %w", redacted, err)
	}
	if err := checkAccess(ctx, client, o.ConnectTimeout, refused); err != nil {
		client.Close()
		return nil, transport.OpenFailed("pulsar", redacted, err)
	}
	t := newTransport(client, o)
	t.ownsClient = true
	return t, nil
}

// KeepAliveInterval is how often a client that [OpenURL] builds pings each broker
// connection (pulsar-client-go's default is 30 s). The client drops a connection from
// which nothing came for two intervals, checked every interval: a connection that went
// silent is found dead within about 9 s (the 10 s bound of docs/reliability.md), and
// the client reconnects. A client given to [New] keeps its own setting.
const KeepAliveInterval = 3 * time.Second

// ErrUnreachable matches the error of [OpenURL] when no broker of the URL accepted a
// connection within the connect timeout.
var ErrUnreachable = errors.New("pulsar: broker unreachable")

// probe dials the brokers of serviceURL within timeout ([driverkit.Reach]), where the
// client would retry until each operation's timeout.
func probe(ctx context.Context, serviceURL string, timeout time.Duration, tlsConfig *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, hosts, _ := strings.Cut(serviceURL, "://")
	err := driverkit.Reach(ctx, strings.Split(hosts, ","), tlsConfig)
	if err == nil || transport.IsTLSError(err) {
		return err // a refused certificate: the broker answered
	}
	return fmt.Errorf("%w: no broker of %s accepted a connection within %s (connect_timeout): %w", ErrUnreachable, serviceURL, timeout, err)
}

// New builds a transport around a client you built yourself (TLS, token or OAuth2
// authentication, a listener name). By default [Transport.Close] leaves the client open;
// see [WithCloseClient].
func New(client pc.Client, opts ...Option) (*Transport, error) {
	if client == nil {
		return nil, errors.New("pulsar: New needs a client")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	t := newTransport(client, o)
	t.ownsClient = o.closeClient
	return t, nil
}

func newTransport(client pc.Client, o options) *Transport {
	t := &Transport{client: client, opts: o, log: o.Logger}
	t.producers = driverkit.Pool[pc.Producer]{Make: t.createProducer, Free: func(ctx context.Context, p pc.Producer) error {
		defer p.Close()
		return p.FlushWithCtx(ctx)
	}, Discard: func(_ context.Context, p pc.Producer) error {
		// A dropped producer failed a write and may be closing itself: a flush would
		// race the client's own close of its event channel (pulsar-client-go v0.19.0).
		p.Close()
		return nil
	}}
	return t
}

// Transport is a connection to a Pulsar cluster. It is safe for concurrent use.
type Transport struct {
	client     pc.Client
	opts       options
	log        *slog.Logger
	ownsClient bool

	// faultHook, when set (by tests), fails the settle writes it returns an error for.
	faultHook atomic.Pointer[func(*transport.Message) error]

	consumers driverkit.Group             // the consumers opened, closed with the transport
	producers driverkit.Pool[pc.Producer] // one per topic written to
	closing   atomic.Bool
}

// Client returns the Pulsar client the transport uses.
func (t *Transport) Client() pc.Client { return t.client }

// Capabilities reports the Pulsar binding: attempts are max(body, redelivery count),
// delays on Shared and Key_Shared subscriptions only, dead letters in "<queue>.dlq".
func (t *Transport) Capabilities() transport.Capabilities {
	return transport.Capabilities{
		Attempts:         transport.AttemptsMaxNative,
		Delay:            t.opts.subType.delays(),
		DeadLetterSuffix: ".dlq",
		PublishConfirmed: true,
	}
}

// producer returns the cached producer of topic, creating it on first use.
func (t *Transport) producer(ctx context.Context, topic string) (pc.Producer, error) {
	if t.consumers.Closed() { // Close closes the consumers, then the producers
		return nil, transport.ErrClosed
	}
	return t.producers.Get(ctx, topic)
}

func (t *Transport) createProducer(topic string) (pc.Producer, error) {
	po := pc.ProducerOptions{
		Topic:             topic,
		DisableBatching:   !t.opts.batching,
		SendTimeout:       t.opts.sendTimeout,
		BackOffPolicyFunc: newReconnectBackoff,
	}
	if t.opts.producerOptions != nil {
		t.opts.producerOptions(&po)
	}
	return t.client.CreateProducer(po)
}

// dropProducer forgets the producer p of topic after a write through it failed, so the
// next write gets a new one: pulsar-client-go detaches a producer whose write the broker
// refused with NotAllowedError, and its later writes all time out (issue 16).
func (t *Transport) dropProducer(topic string, p pc.Producer) { t.producers.Drop(topic, p) }

// ErrEmptyBody is returned for a write with an empty body, which Pulsar Go consumers
// discard as corrupt.
var ErrEmptyBody = errors.New("pulsar: empty message body (Pulsar Go consumers discard empty payloads)")

// check refuses a write the transport cannot make (no queue, an empty body, over the
// size limit) and returns it projected for the producer.
func (t *Transport) check(m *transport.Message) (*pc.ProducerMessage, error) {
	if m == nil || m.Queue == "" {
		return nil, errors.New("pulsar: message has no queue")
	}
	if len(m.Body) == 0 {
		return nil, ErrEmptyBody
	}
	pm := producerMessage(m)
	if err := t.opts.CheckSize(m.Queue, wireSize(pm), MetadataReserve); err != nil {
		return nil, err
	}
	return pm, nil
}

// send writes m and waits for the broker to confirm it.
func (t *Transport) send(ctx context.Context, m *transport.Message) error {
	pm, err := t.check(m)
	if err != nil {
		return err
	}
	p, err := t.producer(ctx, m.Queue)
	if err != nil {
		return err
	}
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.opts.sendTimeout)
		defer cancel()
	}
	if _, err = p.Send(ctx, pm); err != nil {
		t.dropProducer(m.Queue, p)
		return t.refused(m.Queue, wireSize(pm), err)
	}
	return nil
}

// refused is err, a write's failure, matching [transport.ErrTooLarge] when the broker's
// maxMessageSize refused it (an internal error of the client, known by its text).
func (t *Transport) refused(queue string, size int, err error) error {
	if errors.Is(err, pc.ErrMessageTooLarge) || strings.Contains(err.Error(), "exceeds MaxMessageSize") {
		return fmt.Errorf("%w: %d bytes for %q, over the broker's maxMessageSize, which is below the transport's max_message_size=%d: %w",
			transport.ErrTooLarge, size, queue, t.opts.MaxMessageSize, err)
	}
	return err
}

// wireSize is what the size check counts of a write: the payload, the properties and
// the key, as the broker counts them within a message's metadata.
func wireSize(pm *pc.ProducerMessage) int {
	n := len(pm.Payload)
	for k, v := range pm.Properties {
		n += len(k) + len(v) + 8 // the key-value entry's tags and lengths
	}
	if pm.Key != "" {
		n += len(pm.Key) + 4
	}
	return n
}

// settleFault is the error a test's fault hook makes a settle write fail with.
func (t *Transport) settleFault(m *transport.Message) error {
	if f := t.faultHook.Load(); f != nil {
		return (*f)(m)
	}
	return nil
}

// sendSettle makes one settle write, unless a test's fault hook refuses it.
func (t *Transport) sendSettle(ctx context.Context, m *transport.Message) error {
	if err := t.settleFault(m); err != nil {
		return err
	}
	return t.send(ctx, m)
}

// Publish writes one message to the topic m.Queue and waits for the broker's receipt.
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	if err := t.send(ctx, m); err != nil {
		q := ""
		if m != nil {
			q = m.Queue
		}
		return fmt.Errorf("pulsar: publish to %q: %w", q, err)
	}
	return nil
}

// Close closes the consumers (their unsettled deliveries go back to the broker, their
// pipelined settlements finish, bounded by ctx), flushes and closes every producer and,
// when the transport owns it, the client. It returns the errors of those steps joined.
func (t *Transport) Close(ctx context.Context) error {
	if !t.closing.CompareAndSwap(false, true) {
		return nil
	}
	err := errors.Join(t.consumers.Close(ctx), t.producers.Close(ctx))
	if t.ownsClient {
		t.client.Close()
	}
	if err != nil {
		return fmt.Errorf("pulsar: close: %w", err)
	}
	return nil
}
