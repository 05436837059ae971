package amqp

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

func init() {
	for _, scheme := range []string{"amqp", "amqps"} {
		transport.Register(scheme, func(ctx context.Context, u *url.URL) (transport.Transport, error) {
			return dialURL(ctx, u, WithLogger(transport.LoggerFrom(ctx)))
		})
	}
}

// MaxDelay is the longest delay a delay queue can hold: x-message-ttl is an unsigned
// 32-bit number of milliseconds.
const MaxDelay = time.Duration(1<<32-1) * time.Millisecond

// DefaultMaxMessageSize is RabbitMQ's default max_message_size (128 MiB since 3.8;
// RabbitMQ 4 lowers it to 16 MiB): a longer body fails with a [*transport.TooLargeError]
// before it is sent. Set the broker's own value with [WithMaxMessageSize].
const DefaultMaxMessageSize = 128 << 20

// Defaults of the options of the same names.
const (
	DefaultConnectTimeout = 30 * time.Second // WithConnectTimeout: a dial with its handshakes
	DefaultConfirmTimeout = 30 * time.Second // WithConfirmTimeout
	DefaultHeartbeat      = 3 * time.Second  // WithHeartbeat: a dead connection is found within 4.5 s
	DefaultPublishWait    = 30 * time.Second // WithPublishWait
)

// ErrDeliveryLost matches a Settle of a delivery whose channel or connection died
// before it was settled. The broker redelivers such a delivery; nothing was written
// for it. The error also matches [transport.ErrAlreadySettled].
var ErrDeliveryLost = errors.New("amqp: delivery's channel was lost; the broker redelivers it")

var (
	errConnectionLost = errors.New("amqp: connection lost and no redial function (use WithRedial)")
	errNoConnection   = errors.New("amqp: no connection")
)

// Option configures a [Transport].
type Option func(*settings)

type settings struct {
	driverkit.Common                       // logger, connect timeout (of a dial), size limit, bad values
	confirmTimeout, publishWait, heartbeat time.Duration
	noUserConfirm, noDeclare, pipeline     bool
	connName                               string
	tlsConfig                              *tls.Config
	hosts                                  []string // the URL's nodes, tried in turn
	quorum                                 bool     // declare quorum queues (queue_type=quorum)
	dialer                                 func(ctx context.Context, network, addr string) (net.Conn, error)
	redial                                 func(ctx context.Context) (*amqp091.Connection, error)
}

func defaultSettings() settings {
	return settings{Common: driverkit.NewCommon("amqp", DefaultConnectTimeout, DefaultMaxMessageSize, 0),
		confirmTimeout: DefaultConfirmTimeout, publishWait: DefaultPublishWait, heartbeat: DefaultHeartbeat,
		pipeline: true, connName: "babelqueue-go"}
}

// WithLogger sets the logger for reconnections and other events (default
// slog.Default(); nil keeps it).
func WithLogger(l *slog.Logger) Option { return func(s *settings) { s.SetLogger(l) } }

// WithConnectTimeout bounds each dial with its TLS and AMQP handshakes (default
// [DefaultConnectTimeout]; connect_timeout in the URL, or RabbitMQ's connection_timeout
// in milliseconds). A d of zero or less is an error matching babelqueue.ErrInvalidOption.
func WithConnectTimeout(d time.Duration) Option { return func(s *settings) { s.SetConnectTimeout(d) } }

// WithConfirmTimeout bounds the wait for a publisher confirm, for settle writes and for
// the user's Publish (default [DefaultConfirmTimeout]). A context deadline that comes
// sooner wins. A d of zero or less is an error matching babelqueue.ErrInvalidOption.
func WithConfirmTimeout(d time.Duration) Option {
	return func(s *settings) { s.SetAtLeast("WithConfirmTimeout", &s.confirmTimeout, d, 1) }
}

// WithPublishWait bounds how long Publish and PublishConfirmed wait for a lost
// connection to come back before they fail (default [DefaultPublishWait]; publish_wait
// in the URL); a context deadline that comes sooner wins. Zero makes them fail at once
// while the connection is lost. A negative d is an error matching
// babelqueue.ErrInvalidOption.
func WithPublishWait(d time.Duration) Option {
	return func(s *settings) { s.SetAtLeast("WithPublishWait", &s.publishWait, d, 0) }
}

// WithoutPublishConfirms makes the user's Publish return as soon as the message is
// written to the socket, without waiting for the broker's confirm. Settle writes are
// always confirmed.
func WithoutPublishConfirms() Option { return func(s *settings) { s.noUserConfirm = true } }

// WithPipelinedSettles sets whether the runtime's settle writes (retry, release, dead
// letter) are pipelined (default true; pipeline_settles in the URL): Settle returns once
// the writes are published, the delivery is acknowledged once every write is confirmed,
// and rewound when one is not (logged). Not pipelined, Settle waits for the confirms and
// returns a failed write as a [transport.SettleWriteError] (docs/transports/amqp.md).
func WithPipelinedSettles(on bool) Option { return func(s *settings) { s.pipeline = on } }

// WithQueueType sets the type of every queue the transport declares: "classic" (the
// default; declared with no arguments, as the Python SDK declares them) or "quorum"
// (x-queue-type=quorum; queue_type in the URL). Every process sharing a queue must
// declare it alike (docs/transports/amqp.md, Clusters). Anything else is an error
// matching babelqueue.ErrInvalidOption.
func WithQueueType(name string) Option {
	return func(s *settings) {
		quorum, ok := queueTypes[strings.ToLower(name)]
		if !ok {
			s.Invalid("WithQueueType", "want classic or quorum, got %q", name)
			return
		}
		s.quorum = quorum
	}
}

// queueTypes are the queue types, each quorum or not.
var queueTypes = map[string]bool{"classic": false, "quorum": true}

// WithoutDeclare stops the transport from declaring work and dead-letter queues, for a
// topology managed elsewhere (quorum queues, policies). Publishing to a queue that
// does not exist then fails with [ErrUnroutable] (every write is mandatory). Delay
// queues are still declared.
func WithoutDeclare() Option { return func(s *settings) { s.noDeclare = true } }

// WithConnectionName sets the connection_name client property, shown by
// rabbitmqctl list_connections (default "babelqueue-go").
func WithConnectionName(name string) Option { return func(s *settings) { s.connName = name } }

// WithHeartbeat sets the heartbeat interval a dialled connection asks for, in whole
// seconds (rounded up; default [DefaultHeartbeat]; heartbeat in the URL); the broker
// may lower it. A connection that brings no frame for 1.5 heartbeats is declared dead,
// closed, logged and replaced (RabbitMQ finds it dead after about three). Zero takes
// the broker's proposal. A negative d is an error matching babelqueue.ErrInvalidOption.
func WithHeartbeat(d time.Duration) Option {
	return func(s *settings) { s.SetAtLeast("WithHeartbeat", &s.heartbeat, d, 0) }
}

// WithMaxMessageSize sets the longest body a publish or settle write may carry: the
// broker's max_message_size (default [DefaultMaxMessageSize]; max_message_size in the
// URL). An n of zero or less is an error matching babelqueue.ErrInvalidOption.
func WithMaxMessageSize(n int) Option { return func(s *settings) { s.SetMaxMessageSize(n) } }

// WithTLSConfig sets the TLS configuration used for amqps:// URLs, in place of the one
// the URL's TLS parameters describe (docs/security.md; [transport.TLSOptions] builds the
// same configuration in code).
func WithTLSConfig(c *tls.Config) Option { return func(s *settings) { s.tlsConfig = c } }

// WithDialer replaces the TCP dialer, for proxies, tunnels or tests. It is called for
// every (re)connection.
func WithDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(s *settings) { s.dialer = dial }
}

// WithRedial gives a transport built with [New] a way to open a new connection when
// the one it was given is lost. Without it such a transport stops working once its
// connection closes.
func WithRedial(redial func(ctx context.Context) (*amqp091.Connection, error)) Option {
	return func(s *settings) { s.redial = redial }
}

// Dial connects to the broker at rawURL (amqp:// or amqps://) and returns a transport
// that redials it whenever the connection is lost.
func Dial(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	u, err := driverkit.ParseURL("amqp", rawURL)
	if err != nil {
		return nil, err
	}
	return dialURL(ctx, u, opts...)
}

// clientParams are the RabbitMQ URI query parameters amqp091 reads, the only ones
// passed on to it; the others are this package's own.
var clientParams = []string{"heartbeat", "connection_timeout", "channel_max", "auth_mechanism"}

// tlsAliases are the RabbitMQ URI spec's names of the shared TLS parameters
// (driverkit.Query.TLS), still accepted.
var tlsAliases = map[string]string{
	"cacertfile": transport.ParamTLSCA, "certfile": transport.ParamTLSCert,
	"keyfile": transport.ParamTLSKey, "server_name_indication": transport.ParamTLSServerName,
}

// parseURL checks u and returns the URL handed to amqp091 (without this package's own
// parameters) and the settings the URL sets.
func parseURL(u *url.URL, s *settings) (string, error) {
	scheme := strings.ToLower(u.Scheme)
	bad := func(param, reason string) error {
		return &transport.BadURLError{Scheme: scheme, Param: param, Reason: reason}
	}
	if scheme != "amqp" && scheme != "amqps" {
		return "", bad("scheme", "want amqp:// or amqps://")
	}
	if u.Opaque != "" {
		return "", bad("host", "want amqp://[user:password@]host[:port][/vhost]")
	}
	pq, err := driverkit.ParseQuery("amqp", u, slices.Concat(clientParams, urlParams.Names(), transport.TLSParams, slices.Collect(maps.Keys(tlsAliases)),
		[]string{"connection_name", "queue_type", "connect_timeout", "max_message_size"})...)
	if err != nil {
		return "", err
	}
	if s.hosts, err = driverkit.Hosts(u, map[bool]string{false: "5672", true: "5671"}[scheme == "amqps"]); errors.Is(err, driverkit.ErrBadPort) {
		return "", bad("port", err.Error())
	} else if err != nil {
		return "", bad("host", err.Error())
	}
	if strings.Contains(strings.TrimPrefix(u.Path, "/"), "/") {
		return "", bad("vhost", "a vhost containing '/' must be percent-encoded (%2F)")
	}
	if s.tlsConfig, err = pq.TLS(scheme == "amqps", tlsAliases); err != nil {
		return "", err
	}
	if m, ok := pq.String("auth_mechanism"); ok && !slices.Contains([]string{"plain", "amqplain", "external"}, strings.ToLower(m)) {
		return "", pq.Bad("auth_mechanism", "want plain, amqplain or external")
	}
	opts, err := urlParams.Read(pq)
	if err == nil {
		err = s.Query(pq) // connect_timeout, max_message_size
	}
	if err != nil {
		return "", err
	}
	for _, o := range opts {
		o(s)
	}
	if name, ok := pq.String("connection_name"); ok {
		s.connName = name
	}
	if typ, ok := pq.String("queue_type"); ok {
		if s.quorum, ok = queueTypes[strings.ToLower(typ)]; !ok {
			return "", pq.Bad("queue_type", "want classic or quorum")
		}
	}
	c := *u
	c.Scheme, c.Host = scheme, s.hosts[0] // the dialer puts each node in turn here
	c.Fragment, c.RawFragment = "", ""
	q := url.Values{}
	for _, p := range clientParams {
		if v, ok := u.Query()[p]; ok {
			q[p] = v
		}
	}
	c.RawQuery = q.Encode()
	if _, err := amqp091.ParseURI(c.String()); err != nil {
		// amqp091's messages never hold the password, but keep to a fixed reason anyway.
		return "", bad("url", "rejected by the AMQP client")
	}
	return c.String(), nil
}

// urlParams are the URL parameters read into the settings, as the options they set
// (channel_max is only checked: amqp091 reads it).
var urlParams = driverkit.Params[Option]{
	{Name: "channel_max", Int: func(int) Option { return func(*settings) {} }, Max: 65535},
	{Name: "heartbeat", Int: func(n int) Option { return WithHeartbeat(time.Duration(n) * time.Second) }, Max: 65535},
	{Name: "connection_timeout", Int: func(n int) Option { return WithConnectTimeout(time.Duration(n) * time.Millisecond) }, Min: 1, Max: 1<<31 - 1},
	{Name: "publish_confirms", Bool: func(on bool) Option { return func(s *settings) { s.noUserConfirm = !on } }},
	{Name: "declare", Bool: func(on bool) Option { return func(s *settings) { s.noDeclare = !on } }},
	{Name: "pipeline_settles", Bool: WithPipelinedSettles},
	{Name: "confirm_timeout", Duration: WithConfirmTimeout, Lo: time.Millisecond},
	{Name: "publish_wait", Duration: WithPublishWait},
}

func dialURL(ctx context.Context, u *url.URL, opts ...Option) (*Transport, error) {
	s := defaultSettings()
	raw, err := parseURL(u, &s)
	if err != nil {
		return nil, err
	}
	return open(s, opts, func(t *Transport) (*amqp091.Connection, error) {
		t.conn.Dial = t.dialer(raw, u)
		transport.WarnInsecureTLS(t.log, "amqp", transport.RedactURL(u), t.s.tlsConfig)
		return t.conn.Dial(ctx)
	})
}

// dialer returns the function that opens a connection to raw with the transport's
// settings; u, redacted, names the broker in its errors. amqp091 takes the URL's
// heartbeat over its Config's (and a zero there as the broker's): raw gets the setting.
// A URL of several nodes is dialled through [driverkit.Failover]: from the node after
// the last connection's, in turn.
func (t *Transport) dialer(raw string, u *url.URL) func(context.Context) (*amqp091.Connection, error) {
	s := &t.s
	c, _ := url.Parse(raw)
	q := c.Query()
	q.Set("heartbeat", strconv.FormatInt(int64((s.heartbeat+time.Second-1)/time.Second), 10))
	c.RawQuery = q.Encode()
	redacted := transport.RedactURL(u)
	tlsConfig, certWatch := transport.WatchClientCert(s.tlsConfig)
	hosts := s.hosts // parseURL set at least one
	nodes := driverkit.NewFailover(hosts)
	return func(ctx context.Context) (*amqp091.Connection, error) {
		var conn *amqp091.Connection
		node, _, err := nodes.Dial(ctx, func(ctx context.Context, node string) error {
			nu := *c
			nu.Host = node
			var err error
			if conn, err = dialNode(ctx, nu.String(), s, tlsConfig); err != nil {
				return authCause(certWatch.Explain(closedEarly(scrub(err, u))))
			}
			return nil
		})
		if err != nil {
			return nil, transport.OpenFailed("amqp", redacted, err)
		}
		if len(hosts) > 1 {
			t.log.Info("amqp: connected", "node", node)
		}
		return conn, nil
	}
}

// dialNode opens a connection to raw, one node, with s's settings.
func dialNode(ctx context.Context, raw string, s *settings, tlsConfig *tls.Config) (*amqp091.Connection, error) {
	cfg := amqp091.Config{Properties: amqp091.NewConnectionProperties()}
	if tlsConfig != nil {
		cfg.TLSClientConfig = tlsConfig.Clone()
	}
	cfg.Properties.SetClientConnectionName(s.connName)
	var live *liveConn
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, s.ConnectTimeout)
		defer cancel()
		dial := s.dialer
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		deadline, _ := ctx.Deadline() // for the TLS and AMQP handshakes; amqp091 clears it once open
		if err := conn.SetDeadline(deadline); err != nil {
			_ = conn.Close()
			return nil, err
		}
		live = &liveConn{Conn: conn}
		return live, nil
	}
	conn, err := amqp091.DialConfig(raw, cfg)
	if err != nil {
		return nil, err
	}
	live.opened(conn.Config.Heartbeat)
	return conn, nil
}

// scrub makes sure an error from the client never carries the URL's password.
func scrub(err error, u *url.URL) error {
	if pw, ok := u.User.Password(); ok && pw != "" && strings.Contains(err.Error(), pw) {
		return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
	}
	return err
}

// liveConn is the socket under a dialled connection. amqp091 sets a read deadline of 1.5
// heartbeats after every frame it reads; when one passes, liveConn closes the socket (so
// that a write blocked on a dead network fails too: amqp091's shutdown waits for it)
// and names the cause, which the transport logs.
type liveConn struct {
	net.Conn
	bound atomic.Int64 // 1.5 heartbeats once the connection is open; 0 before, or without heartbeats
}

// opened arms c for a connection open with heartbeat. It sets a first read deadline too:
// amqp091 may clear the handshake's deadline after its heartbeater set the first one.
func (c *liveConn) opened(heartbeat time.Duration) {
	if bound := 3 * heartbeat / 2; bound > 0 {
		c.bound.Store(int64(bound))
		_ = c.Conn.SetReadDeadline(time.Now().Add(bound))
	}
}

func (c *liveConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if bound := time.Duration(c.bound.Load()); bound > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		_ = c.Conn.Close()
		err = fmt.Errorf("amqp: no frame from the broker for %s (1.5 heartbeats): the connection is dead", bound)
	}
	return n, err
}

// New builds a transport around a connection the caller opened (custom TLS, auth,
// tuning). The transport does not close conn on Close: it is the caller's. When conn is
// lost the transport uses the function given with [WithRedial], if any, to open a new
// one. Do not enable amqp091's experimental automatic recovery on conn: the transport
// tracks channels itself. How soon a dead conn is found is up to conn's heartbeat
// (amqp091 declares a connection dead after 1.5 heartbeats without a frame).
func New(conn *amqp091.Connection, opts ...Option) (*Transport, error) {
	if conn == nil {
		return nil, errors.New("amqp: New: nil connection")
	}
	return open(defaultSettings(), opts, func(t *Transport) (*amqp091.Connection, error) {
		t.userConn, t.conn.Dial = conn, t.s.redial
		return conn, nil
	})
}

// open builds the transport of s and opts (which win over the URL) around the
// connection first returns.
func open(s settings, opts []Option, first func(*Transport) (*amqp091.Connection, error)) (*Transport, error) {
	for _, o := range opts {
		o(&s)
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	t := newTransport(s)
	conn, err := first(t)
	if err != nil {
		return nil, err
	}
	t.conn.Start(conn)
	return t, nil
}

func newTransport(s settings) *Transport {
	t := &Transport{s: s, log: s.Logger.With("transport", "amqp"), declared: map[string]uint64{}}
	t.conn = driverkit.Redialer[*amqp091.Connection]{Live: func(c *amqp091.Connection) bool { return !c.IsClosed() },
		Installed: t.installed, Release: func(c *amqp091.Connection) { _ = c.Close() },
		Timeout: s.ConnectTimeout, FirstTimeout: firstRedialTimeout, Unrecoverable: errConnectionLost}
	return t
}

// firstRedialTimeout bounds the first dial after a lost connection, doubled for each
// that fails, up to the connect timeout (docs/transports/amqp.md, Redials).
const firstRedialTimeout = 3 * time.Second

// Transport is a RabbitMQ connection. It is safe for concurrent use.
type Transport struct {
	s    settings
	log  *slog.Logger
	conn driverkit.Redialer[*amqp091.Connection] // dialled again when lost (no redial without WithRedial: New)
	// consumers are the consumers opened, closed with the transport: once it is
	// Closed, so is the transport.
	consumers driverkit.Group
	userConn  *amqp091.Connection // the caller's connection, never closed by us

	mu       sync.Mutex        // guards the fields below
	declared map[string]uint64 // the queues declared, each with the generation of the connection
	idle     []*pubChan        // idle confirm channels
}

// Capabilities reports the RabbitMQ binding: attempts from the body, delays through
// per-delay queues, no native delivery count.
func (t *Transport) Capabilities() transport.Capabilities {
	return transport.Capabilities{Attempts: transport.AttemptsFromBody, Delay: true, MaxDelay: MaxDelay,
		PublishConfirmed: !t.s.noUserConfirm}
}

// installed closes old, the lost connection (unless it is the caller's), and logs the
// loss of conn, with the cause, when it happens; Publish reports the cause when it gives
// up waiting.
func (t *Transport) installed(old, conn *amqp091.Connection) {
	t.mu.Lock()
	t.dropIdle()
	t.mu.Unlock()
	if old != nil {
		if old != t.userConn {
			_ = old.Close()
		}
		t.log.Info("amqp: reconnected")
	}
	lost := conn.NotifyClose(make(chan *amqp091.Error, 1))
	go func() {
		if err, ok := <-lost; ok && err != nil {
			t.log.Warn("amqp: connection lost", "cause", err)
			t.conn.Lost(err)
		}
	}()
}

// dropIdle closes the idle confirm channels (t.mu held).
func (t *Transport) dropIdle() {
	for _, pc := range t.idle {
		_ = pc.ch.Close()
	}
	t.idle = nil
}

// connection returns a live connection and its generation, or waits until ctx ends for
// the dial under way (or one it starts: [driverkit.Redialer]). A failure that dialling
// again may cure is unsent: not once the transport is closed or cannot redial, nor when
// the broker refused the login, vhost or connection, or its certificate failed.
func (t *Transport) connection(ctx context.Context) (*amqp091.Connection, uint64, error) {
	conn, gen, err := t.conn.Get(ctx)
	if err == nil {
		return conn, gen, nil
	}
	switch {
	case errors.Is(err, transport.ErrClosed), errors.Is(err, errConnectionLost), errors.As(err, new(*tls.CertificateVerificationError)),
		errors.Is(err, transport.ErrTLS), errors.Is(authCause(err), transport.ErrAuth):
		return conn, gen, err
	}
	return conn, gen, driverkit.Unsent(err)
}

// lostWith marks err, a step before a publish was written, unsent ([driverkit.Unsent]:
// Publish makes it again) when conn or the channel was lost; a refusal by a live broker
// stays final.
func lostWith(conn *amqp091.Connection, err error) error {
	if errors.Is(err, amqp091.ErrClosed) || conn.IsClosed() {
		return driverkit.Unsent(err)
	}
	return err
}

// rideOut makes write, and again while it reaches nothing (unsent), within ctx and the
// publish wait ([WithPublishWait]): driverkit.RideOut, 50 ms doubling to 1 s between.
// Once the connection is lost, write's argument bounds its wait for one by the publish
// wait too (zero: fail at once), and a write that bound ended fails with the broker's
// last error.
func (t *Transport) rideOut(ctx context.Context, write func(wait context.Context) error) error {
	wait, cancel := ctx, context.CancelFunc(func() {})
	defer func() { cancel() }()
	return driverkit.RideOut(ctx, "amqp", t.s.publishWait, driverkit.Backoff{Min: 50 * time.Millisecond, Max: time.Second}, driverkit.IsUnsent,
		func(context.Context) error {
			if _, _, live := t.conn.Current(); wait == ctx && !live {
				wait, cancel = context.WithTimeout(ctx, t.s.publishWait)
			}
			err := write(wait)
			if driverkit.IsUnsent(err) && wait.Err() != nil {
				err = driverkit.Unsent(cmp.Or(t.conn.Last(), errNoConnection))
			}
			return err
		})
}

// declare declares queue (durable; classic, or quorum with queue_type=quorum) with args on conn, once per connection,
// on a channel of its own: a declare the broker refuses closes the channel.
func (t *Transport) declare(conn *amqp091.Connection, gen uint64, queue string, args amqp091.Table) error {
	t.mu.Lock()
	done := t.declared[queue] == gen
	t.mu.Unlock()
	if done {
		return nil
	}
	if t.s.quorum {
		args = maps.Clone(args)
		if args == nil {
			args = amqp091.Table{}
		}
		args["x-queue-type"] = "quorum"
	}
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDeclare(queue, true, false, false, false, args)
		_ = ch.Close()
	}
	if err != nil {
		return lostWith(conn, fmt.Errorf("amqp: declare queue %q: %w", queue, authCause(err)))
	}
	t.mu.Lock()
	t.declared[queue] = gen
	t.mu.Unlock()
	return nil
}

// forget drops queue from the declare cache (the broker returned a write to it).
func (t *Transport) forget(queue string) {
	t.mu.Lock()
	delete(t.declared, queue)
	t.mu.Unlock()
}

// Close closes every consumer (their unsettled deliveries go back to the broker), the
// channels and, unless it was built with [New], the connection.
func (t *Transport) Close(ctx context.Context) error {
	conn := t.conn.Close()        // no dial from now on
	err := t.consumers.Close(ctx) // nil when closed before
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropIdle()
	if conn != nil && conn != t.userConn && !conn.IsClosed() {
		err = errors.Join(err, conn.Close())
	}
	return err
}
