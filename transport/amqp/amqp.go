package amqp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
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

// DefaultConfirmTimeout bounds the wait for a publisher confirm when no other timeout
// is set.
const DefaultConfirmTimeout = 30 * time.Second

// ErrDeliveryLost matches a Settle of a delivery whose channel or connection died
// before it was settled. The broker redelivers such a delivery; nothing was written
// for it. The error also matches [transport.ErrAlreadySettled].
var ErrDeliveryLost = errors.New("amqp: delivery's channel was lost; the broker redelivers it")

// errConnectionLost is returned when a connection built by the user died and no
// redial function was given.
var errConnectionLost = errors.New("amqp: connection lost and no redial function (use WithRedial)")

// Option configures a [Transport].
type Option func(*settings)

type settings struct {
	logger         *slog.Logger
	confirmTimeout time.Duration
	noUserConfirm  bool
	noDeclare      bool
	connName       string
	heartbeat      time.Duration
	connTimeout    time.Duration
	tlsConfig      *tls.Config
	dialer         func(ctx context.Context, network, addr string) (net.Conn, error)
	redial         func(ctx context.Context) (*amqp091.Connection, error)
	maxIdleChans   int
	maxSize        int
	pipeline       bool // pipelined settle writes (WithPipelinedSettles)
	bad            driverkit.Options
}

func defaultSettings() settings {
	return settings{
		confirmTimeout: DefaultConfirmTimeout,
		connName:       "babelqueue-go",
		connTimeout:    30 * time.Second,
		maxIdleChans:   16,
		maxSize:        DefaultMaxMessageSize,
		pipeline:       true,
		bad:            driverkit.Options{Broker: "amqp"},
	}
}

// WithLogger sets the logger for reconnections and other events (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *settings) { s.logger = l } }

// WithConfirmTimeout bounds the wait for a publisher confirm, for settle writes and for
// the user's Publish (default [DefaultConfirmTimeout]). A context deadline that comes
// sooner wins. A d of zero or less is an error matching babelqueue.ErrInvalidOption.
func WithConfirmTimeout(d time.Duration) Option {
	return func(s *settings) {
		if d <= 0 {
			s.bad.Invalid("WithConfirmTimeout", "want a duration above zero, got %s", d)
			return
		}
		s.confirmTimeout = d
	}
}

// WithoutPublishConfirms makes the user's Publish return as soon as the message is
// written to the socket, without waiting for the broker's confirm. Settle writes are
// always confirmed.
func WithoutPublishConfirms() Option { return func(s *settings) { s.noUserConfirm = true } }

// WithPipelinedSettles sets whether the runtime's settle writes (retry, release, dead
// letter) are pipelined (default true; pipeline_settles in the URL). Pipelined, Settle
// publishes the writes in confirm mode and returns without waiting for their confirms;
// the delivery is acknowledged only once every write is confirmed, and a write that is
// nacked, lost with its channel or not confirmed within the confirm timeout makes the
// transport rewind the delivery itself (a nack with requeue, logged with its cause), so
// it is delivered again: nothing is lost, and a worker never waits for its own write. A
// delivery waiting for its writes still counts against the channel's prefetch
// (basic.qos), so the workers go on meanwhile only as far as the prefetch is above the
// deliveries they hold: give the runtime a prefetch above its concurrency. Not
// pipelined, Settle waits for the confirms and returns a failed write as a
// [transport.SettleWriteError] (the runtime then rewinds the delivery), which costs the
// worker a publisher confirm (a journal flush on the broker) per settlement with writes.
func WithPipelinedSettles(on bool) Option { return func(s *settings) { s.pipeline = on } }

// WithoutDeclare stops the transport from declaring work and dead-letter queues, for a
// topology managed elsewhere (quorum queues, policies). Publishing to a queue that
// does not exist then fails with [ErrUnroutable] (every write is mandatory). Delay
// queues are still declared.
func WithoutDeclare() Option { return func(s *settings) { s.noDeclare = true } }

// WithConnectionName sets the connection_name client property, shown by
// rabbitmqctl list_connections (default "babelqueue-go").
func WithConnectionName(name string) Option { return func(s *settings) { s.connName = name } }

// WithHeartbeat sets the heartbeat interval (default: the server's proposal; zero
// turns heartbeats off). A negative d is an error matching babelqueue.ErrInvalidOption.
func WithHeartbeat(d time.Duration) Option {
	return func(s *settings) {
		if d < 0 {
			s.bad.Invalid("WithHeartbeat", "want a duration of zero or more, got %s", d)
			return
		}
		s.heartbeat = d
	}
}

// WithMaxMessageSize sets the longest body a publish or settle write may carry: the
// broker's max_message_size (default [DefaultMaxMessageSize]). An n of zero or less is
// an error matching babelqueue.ErrInvalidOption.
func WithMaxMessageSize(n int) Option {
	return func(s *settings) {
		if n <= 0 {
			s.bad.Invalid("WithMaxMessageSize", "want a number of bytes above zero, got %d", n)
			return
		}
		s.maxSize = n
	}
}

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
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		reason := "cannot parse URL"
		if errors.As(err, &ue) {
			reason += ": " + ue.Err.Error()
		}
		return nil, fmt.Errorf("%w: %s", transport.ErrBadURL, reason)
	}
	return dialURL(ctx, u, opts...)
}

// ownParams are the query parameters this package reads itself; they are not passed
// on to amqp091.
var ownParams = []string{"publish_confirms", "confirm_timeout", "connection_name", "declare", "pipeline_settles"}

// clientParams are the RabbitMQ URI query parameters amqp091 reads.
var clientParams = []string{"heartbeat", "connection_timeout", "channel_max", "auth_mechanism"}

// tlsAliases are the RabbitMQ URI spec's names of the shared TLS parameters
// (transport.ParseTLS), still accepted.
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
	known := append(append(append([]string(nil), clientParams...), ownParams...), transport.TLSParams...)
	for alias := range tlsAliases {
		known = append(known, alias)
	}
	pq, err := driverkit.ParseQuery("amqp", u, known...)
	if err != nil {
		return "", err
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", bad("port", "not a port number (1-65535)")
		}
	}
	if strings.Contains(u.Host, " ") {
		return "", bad("host", "contains a space")
	}
	if strings.Contains(strings.TrimPrefix(u.Path, "/"), "/") {
		return "", bad("vhost", "a vhost containing '/' must be percent-encoded (%2F)")
	}
	q := u.Query()
	if s.tlsConfig, err = transport.ParseTLS(u, scheme == "amqps", tlsAliases); err != nil {
		return "", tlsOptionError(pq, err)
	}
	if q.Has("heartbeat") {
		n, err := strconv.ParseUint(q.Get("heartbeat"), 10, 16)
		if err != nil {
			return "", pq.Bad("heartbeat", "want whole seconds (0-65535)")
		}
		s.heartbeat = time.Duration(n) * time.Second
	}
	if q.Has("connection_timeout") {
		n, err := strconv.ParseUint(q.Get("connection_timeout"), 10, 31)
		if err != nil || n == 0 {
			return "", pq.Bad("connection_timeout", "want a positive whole number of milliseconds")
		}
		s.connTimeout = time.Duration(n) * time.Millisecond
	}
	if q.Has("channel_max") {
		if _, err := strconv.ParseUint(q.Get("channel_max"), 10, 16); err != nil {
			return "", pq.Bad("channel_max", "want a whole number (0-65535)")
		}
	}
	for _, m := range q["auth_mechanism"] {
		switch strings.ToLower(m) {
		case "plain", "amqplain", "external":
		default:
			return "", pq.Bad("auth_mechanism", "want plain, amqplain or external")
		}
	}
	if b, ok, err := pq.Bool("publish_confirms"); err != nil {
		return "", err
	} else if ok {
		s.noUserConfirm = !b
	}
	if b, ok, err := pq.Bool("declare"); err != nil {
		return "", err
	} else if ok {
		s.noDeclare = !b
	}
	if b, ok, err := pq.Bool("pipeline_settles"); err != nil {
		return "", err
	} else if ok {
		s.pipeline = b
	}
	if d, ok, err := pq.Duration("confirm_timeout", time.Second, time.Millisecond, 0); err != nil {
		return "", err
	} else if ok {
		s.confirmTimeout = d
	}
	if q.Has("connection_name") {
		s.connName = q.Get("connection_name")
	}
	c := *u
	c.Scheme = scheme
	c.Fragment, c.RawFragment = "", ""
	for _, p := range append(ownParams, transport.TLSParams...) {
		q.Del(p)
	}
	for alias := range tlsAliases {
		q.Del(alias)
	}
	c.RawQuery = q.Encode()
	if _, err := amqp091.ParseURI(c.String()); err != nil {
		// amqp091's messages never hold the password, but keep to a fixed reason anyway.
		return "", bad("url", "rejected by the AMQP client")
	}
	return c.String(), nil
}

func dialURL(ctx context.Context, u *url.URL, opts ...Option) (*Transport, error) {
	s := defaultSettings()
	raw, err := parseURL(u, &s)
	if err != nil {
		return nil, err
	}
	// Options given in code win over the URL.
	for _, o := range opts {
		o(&s)
	}
	if err := s.bad.Err(); err != nil {
		return nil, err
	}
	redacted := transport.RedactURL(u)
	t := newTransport(s)
	tlsConfig, certWatch := transport.WatchClientCert(s.tlsConfig)
	t.dial = func(ctx context.Context) (*amqp091.Connection, error) {
		cfg := amqp091.Config{
			Heartbeat:  s.heartbeat,
			Properties: amqp091.NewConnectionProperties(),
		}
		if tlsConfig != nil {
			cfg.TLSClientConfig = tlsConfig.Clone()
		}
		cfg.Properties.SetClientConnectionName(s.connName)
		cfg.Dial = func(network, addr string) (net.Conn, error) {
			dctx, cancel := context.WithTimeout(ctx, s.connTimeout)
			defer cancel()
			var conn net.Conn
			var err error
			if s.dialer != nil {
				conn, err = s.dialer(dctx, network, addr)
			} else {
				var d net.Dialer
				conn, err = d.DialContext(dctx, network, addr)
			}
			if err != nil {
				return nil, err
			}
			// A deadline for the TLS and AMQP handshakes; amqp091 clears it once open.
			deadline := time.Now().Add(s.connTimeout)
			if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
				deadline = dl
			}
			if err := conn.SetDeadline(deadline); err != nil {
				_ = conn.Close()
				return nil, err
			}
			return conn, nil
		}
		conn, err := amqp091.DialConfig(raw, cfg)
		if err != nil {
			return nil, transport.OpenFailed("amqp", redacted, authCause(certWatch.Explain(closedEarly(scrub(err, u)))))
		}
		return conn, nil
	}
	transport.WarnInsecureTLS(t.log, "amqp", redacted, s.tlsConfig)
	if _, _, err := t.connection(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// scrub makes sure an error from the client never carries the URL's password.
func scrub(err error, u *url.URL) error {
	if u.User == nil {
		return err
	}
	pw, ok := u.User.Password()
	if !ok || pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}

// New builds a transport around a connection the caller opened (custom TLS, auth,
// tuning). The transport does not close conn on Close: it is the caller's. When conn is
// lost the transport uses the function given with [WithRedial], if any, to open a new
// one. Do not enable amqp091's experimental automatic recovery on conn: the transport
// tracks channels itself.
func New(conn *amqp091.Connection, opts ...Option) (*Transport, error) {
	if conn == nil {
		return nil, errors.New("amqp: New: nil connection")
	}
	s := defaultSettings()
	for _, o := range opts {
		o(&s)
	}
	if err := s.bad.Err(); err != nil {
		return nil, err
	}
	t := newTransport(s)
	t.conn = conn
	t.gen = 1
	t.userConn = conn
	if s.redial != nil {
		t.dial = s.redial
	}
	return t, nil
}

func newTransport(s settings) *Transport {
	if s.logger == nil {
		s.logger = slog.Default()
	}
	return &Transport{
		s:        s,
		log:      s.logger.With("transport", "amqp"),
		declared: map[string]bool{},
	}
}

// Transport is a RabbitMQ connection. It is safe for concurrent use.
type Transport struct {
	s    settings
	log  *slog.Logger
	dial func(ctx context.Context) (*amqp091.Connection, error)

	mu        sync.Mutex // guards the fields below; held while dialling
	conn      *amqp091.Connection
	userConn  *amqp091.Connection // the caller's connection, never closed by us
	gen       uint64              // bumped for every new connection
	lostGen   uint64              // the generation whose loss was logged
	declared  map[string]bool     // queues declared on the current connection
	idle      []*pubChan          // idle confirm channels of the current connection
	closed    bool
	consumers driverkit.Group // the consumers opened, closed with the transport

	declMu sync.Mutex // serialises declares on the admin channel
	admin  *amqp091.Channel
	adminG uint64
}

// Capabilities reports what the RabbitMQ binding does: attempts from the body, delays
// through per-delay queues, no native delivery count.
func (t *Transport) Capabilities() transport.Capabilities {
	return transport.Capabilities{
		Attempts:         transport.AttemptsFromBody,
		Delay:            true,
		MaxDelay:         MaxDelay,
		PublishConfirmed: !t.s.noUserConfirm,
	}
}

// connection returns a live connection and its generation, dialling a new one when the
// current one is gone.
func (t *Transport) connection(ctx context.Context) (*amqp091.Connection, uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, 0, transport.ErrClosed
	}
	if t.conn != nil && !t.conn.IsClosed() {
		return t.conn, t.gen, nil
	}
	if t.dial == nil {
		return nil, 0, errConnectionLost
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	if t.conn != nil && t.lostGen != t.gen {
		t.lostGen = t.gen // log each lost connection once, not every redial attempt
		t.log.Warn("amqp: connection lost, reconnecting")
	}
	conn, err := t.dial(ctx)
	if err != nil {
		return nil, 0, err
	}
	if t.conn != nil && t.conn != t.userConn {
		_ = t.conn.Close()
	}
	t.conn = conn
	t.gen++
	clear(t.declared)
	for _, pc := range t.idle {
		_ = pc.ch.Close()
	}
	t.idle = nil
	return conn, t.gen, nil
}

// declare declares queue (durable, classic) with args on conn, once per connection.
func (t *Transport) declare(conn *amqp091.Connection, gen uint64, queue string, args amqp091.Table) error {
	t.mu.Lock()
	done := t.gen == gen && t.declared[queue]
	t.mu.Unlock()
	if done {
		return nil
	}
	t.declMu.Lock()
	defer t.declMu.Unlock()
	if t.admin == nil || t.adminG != gen || t.admin.IsClosed() {
		if t.admin != nil {
			_ = t.admin.Close()
		}
		ch, err := conn.Channel()
		if err != nil {
			t.admin = nil
			return fmt.Errorf("amqp: open channel: %w", err)
		}
		t.admin, t.adminG = ch, gen
	}
	if _, err := t.admin.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return fmt.Errorf("amqp: declare queue %q: %w", queue, authCause(err))
	}
	t.mu.Lock()
	if t.gen == gen {
		t.declared[queue] = true
	}
	t.mu.Unlock()
	return nil
}

// forget drops queue from the declare cache, so the next write to it declares it again
// (after the broker returned a write to it: the queue was deleted).
func (t *Transport) forget(queue string) {
	t.mu.Lock()
	delete(t.declared, queue)
	t.mu.Unlock()
}

// Close closes every consumer (their unsettled deliveries go back to the broker), the
// channels and, unless it was built with [New], the connection.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	err := t.consumers.Close(ctx)
	t.declMu.Lock()
	if t.admin != nil {
		_ = t.admin.Close()
		t.admin = nil
	}
	t.declMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, pc := range t.idle {
		_ = pc.ch.Close()
	}
	t.idle = nil
	if t.conn != nil && t.conn != t.userConn && !t.conn.IsClosed() {
		err = errors.Join(err, t.conn.Close())
	}
	return err
}
