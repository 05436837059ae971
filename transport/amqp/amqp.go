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
	DefaultConfirmTimeout = 30 * time.Second // WithConfirmTimeout
	DefaultHeartbeat      = 5 * time.Second  // WithHeartbeat: a dead connection is found within 7.5 s
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
	logger                                              *slog.Logger
	confirmTimeout, publishWait, heartbeat, connTimeout time.Duration
	noUserConfirm, noDeclare, pipeline                  bool
	connName                                            string
	maxSize                                             int
	tlsConfig                                           *tls.Config
	hosts                                               []string // the URL's nodes, tried in turn
	quorum                                              bool     // declare quorum queues (queue_type=quorum)
	dialer                                              func(ctx context.Context, network, addr string) (net.Conn, error)
	redial                                              func(ctx context.Context) (*amqp091.Connection, error)
	bad                                                 driverkit.Options
}

func defaultSettings() settings {
	return settings{confirmTimeout: DefaultConfirmTimeout, publishWait: DefaultPublishWait, heartbeat: DefaultHeartbeat,
		connTimeout: 30 * time.Second, pipeline: true, connName: "babelqueue-go", maxSize: DefaultMaxMessageSize,
		bad: driverkit.Options{Broker: "amqp"}}
}

// duration is an option setting a duration above zero (or zero too, with zeroOK).
func duration(option string, d time.Duration, zeroOK bool, field func(*settings) *time.Duration) Option {
	return func(s *settings) {
		if d < 0 || d == 0 && !zeroOK {
			s.bad.Invalid(option, "want a duration %s, got %s", map[bool]string{true: "of zero or more", false: "above zero"}[zeroOK], d)
			return
		}
		*field(s) = d
	}
}

// WithLogger sets the logger for reconnections and other events (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *settings) { s.logger = l } }

// WithConfirmTimeout bounds the wait for a publisher confirm, for settle writes and for
// the user's Publish (default [DefaultConfirmTimeout]). A context deadline that comes
// sooner wins. A d of zero or less is an error matching babelqueue.ErrInvalidOption.
func WithConfirmTimeout(d time.Duration) Option {
	return duration("WithConfirmTimeout", d, false, func(s *settings) *time.Duration { return &s.confirmTimeout })
}

// WithPublishWait bounds how long Publish and PublishConfirmed wait for a lost
// connection to come back before they fail (default [DefaultPublishWait]; publish_wait
// in the URL); a context deadline that comes sooner wins. Zero makes them fail at once
// while the connection is lost. A negative d is an error matching
// babelqueue.ErrInvalidOption.
func WithPublishWait(d time.Duration) Option {
	return duration("WithPublishWait", d, true, func(s *settings) *time.Duration { return &s.publishWait })
}

// WithoutPublishConfirms makes the user's Publish return as soon as the message is
// written to the socket, without waiting for the broker's confirm. Settle writes are
// always confirmed.
func WithoutPublishConfirms() Option { return func(s *settings) { s.noUserConfirm = true } }

// WithPipelinedSettles sets whether the runtime's settle writes (retry, release, dead
// letter) are pipelined (default true; pipeline_settles in the URL). Pipelined, Settle
// returns once the writes are published; the delivery is acknowledged once every write
// is confirmed, and a write nacked, returned, lost with its channel or not confirmed
// within the confirm timeout makes the transport rewind the delivery itself (logged),
// so it is delivered again. Such a delivery still counts against the channel's
// prefetch: give the runtime a prefetch above its concurrency. Not pipelined, Settle
// waits for the confirms (a broker journal flush per settlement with writes) and
// returns a failed write as a [transport.SettleWriteError].
func WithPipelinedSettles(on bool) Option { return func(s *settings) { s.pipeline = on } }

// WithQueueType sets the type of the queues the transport declares: "classic" (the
// default; declared with no arguments, as the Python SDK declares them) or "quorum"
// (x-queue-type=quorum: replicated on the nodes of a cluster; queue_type in the URL).
// Work, dead-letter and delay queues are all declared with it. Every process sharing a
// queue must declare it alike: RabbitMQ refuses a declare whose x-queue-type differs
// from the queue's with PRECONDITION_FAILED (docs/transports/amqp.md, Clusters).
// Anything else is an error matching babelqueue.ErrInvalidOption.
func WithQueueType(name string) Option {
	return func(s *settings) {
		quorum, ok := isQuorum(name)
		if !ok {
			s.bad.Invalid("WithQueueType", "want classic or quorum, got %q", name)
			return
		}
		s.quorum = quorum
	}
}

// isQuorum reads a queue type: quorum or not, and whether it is one.
func isQuorum(name string) (quorum, ok bool) {
	switch strings.ToLower(name) {
	case "classic":
		return false, true
	case "quorum":
		return true, true
	}
	return false, false
}

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
// may lower it. A connection that brings no frame from the broker for 1.5 heartbeats
// is declared dead, closed, logged and replaced. Zero takes the broker's proposal
// (RabbitMQ's heartbeat setting, 60 s by default; heartbeats are off only when the
// broker proposes zero too). A negative d is an error matching
// babelqueue.ErrInvalidOption.
func WithHeartbeat(d time.Duration) Option {
	return duration("WithHeartbeat", d, true, func(s *settings) *time.Duration { return &s.heartbeat })
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
	if err != nil { // a *url.Error, whose URL (and password) is left out
		return nil, fmt.Errorf("%w: cannot parse URL: %w", transport.ErrBadURL, errors.Unwrap(err))
	}
	return dialURL(ctx, u, opts...)
}

// ownParams are the query parameters this package reads itself; they are not passed
// on to amqp091.
var ownParams = []string{"publish_confirms", "confirm_timeout", "connection_name", "declare", "pipeline_settles", "publish_wait", "queue_type"}

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
	if strings.Contains(u.Host, " ") {
		return "", bad("host", "contains a space")
	}
	if s.hosts, err = driverkit.Hosts(u, map[bool]string{false: "5672", true: "5671"}[scheme == "amqps"]); err != nil {
		param := "host"
		if strings.Contains(err.Error(), "port") {
			param = "port"
		}
		return "", bad(param, err.Error())
	}
	if strings.Contains(strings.TrimPrefix(u.Path, "/"), "/") {
		return "", bad("vhost", "a vhost containing '/' must be percent-encoded (%2F)")
	}
	q := u.Query()
	if s.tlsConfig, err = pq.TLS(u, scheme == "amqps", tlsAliases); err != nil {
		return "", err
	}
	if m, ok := pq.String("auth_mechanism"); ok && !slices.Contains([]string{"plain", "amqplain", "external"}, strings.ToLower(m)) {
		return "", pq.Bad("auth_mechanism", "want plain, amqplain or external")
	}
	if err := errors.Join(
		setInt(pq, "channel_max", 0, 65535, 0, nil), // checked here, read by amqp091
		setInt(pq, "heartbeat", 0, 65535, time.Second, &s.heartbeat),
		setInt(pq, "connection_timeout", 1, 1<<31-1, time.Millisecond, &s.connTimeout),
		setBool(pq, "publish_confirms", &s.noUserConfirm, true),
		setBool(pq, "declare", &s.noDeclare, true),
		setBool(pq, "pipeline_settles", &s.pipeline, false),
		setDuration(pq, "confirm_timeout", time.Millisecond, &s.confirmTimeout),
		setDuration(pq, "publish_wait", 0, &s.publishWait),
	); err != nil {
		return "", err
	}
	if name, ok := pq.String("connection_name"); ok {
		s.connName = name
	}
	if typ, ok := pq.String("queue_type"); ok {
		if s.quorum, ok = isQuorum(typ); !ok {
			return "", pq.Bad("queue_type", "want classic or quorum")
		}
	}
	c := *u
	c.Scheme, c.Host = scheme, s.hosts[0] // the dialer puts each node in turn here
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

// setInt, setBool and setDuration store a query parameter, when given, in field and
// return the error of a bad value.
func setInt(q driverkit.Query, name string, lo, hi int, unit time.Duration, field *time.Duration) error {
	n, ok, err := q.Int(name, lo, hi)
	if ok && err == nil && field != nil {
		*field = time.Duration(n) * unit
	}
	return err
}

func setBool(q driverkit.Query, name string, field *bool, negated bool) error {
	b, ok, err := q.Bool(name)
	if ok && err == nil {
		*field = b != negated
	}
	return err
}

func setDuration(q driverkit.Query, name string, least time.Duration, field *time.Duration) error {
	d, ok, err := q.Duration(name, time.Second, least, 0)
	if ok && err == nil {
		*field = d
	}
	return err
}

func dialURL(ctx context.Context, u *url.URL, opts ...Option) (*Transport, error) {
	s := defaultSettings()
	raw, err := parseURL(u, &s)
	if err != nil {
		return nil, err
	}
	return open(s, opts, func(t *Transport) (*amqp091.Connection, error) {
		t.dial = t.dialer(raw, u)
		transport.WarnInsecureTLS(t.log, "amqp", transport.RedactURL(u), t.s.tlsConfig)
		return t.dial(ctx)
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
	hosts := s.hosts
	if len(hosts) == 0 {
		hosts = []string{c.Host}
	}
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
		ctx, cancel := context.WithTimeout(ctx, s.connTimeout)
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
		t.userConn, t.dial = conn, t.s.redial
		return conn, nil
	})
}

// open builds the transport of s and opts (which win over the URL) around the
// connection first returns.
func open(s settings, opts []Option, first func(*Transport) (*amqp091.Connection, error)) (*Transport, error) {
	for _, o := range opts {
		o(&s)
	}
	if err := s.bad.Err(); err != nil {
		return nil, err
	}
	t := newTransport(s)
	conn, err := first(t)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.install(conn)
	return t, nil
}

func newTransport(s settings) *Transport {
	if s.logger == nil {
		s.logger = slog.Default()
	}
	return &Transport{s: s, log: s.logger.With("transport", "amqp"), declared: map[string]bool{}}
}

// Transport is a RabbitMQ connection. It is safe for concurrent use.
type Transport struct {
	s    settings
	log  *slog.Logger
	dial func(ctx context.Context) (*amqp091.Connection, error)

	mu        sync.Mutex // guards the fields below
	conn      *amqp091.Connection
	userConn  *amqp091.Connection // the caller's connection, never closed by us
	gen       uint64              // bumped for every new connection
	dialing   chan struct{}       // closed when the dial under way ends; nil when none is
	lastErr   error               // why the last connection was lost, or the last dial failed
	declared  map[string]bool     // queues declared on the current connection
	idle      []*pubChan          // idle confirm channels of the current connection
	closed    bool
	consumers driverkit.Group // the consumers opened, closed with the transport
}

// Capabilities reports the RabbitMQ binding: attempts from the body, delays through
// per-delay queues, no native delivery count.
func (t *Transport) Capabilities() transport.Capabilities {
	return transport.Capabilities{Attempts: transport.AttemptsFromBody, Delay: true, MaxDelay: MaxDelay,
		PublishConfirmed: !t.s.noUserConfirm}
}

// install makes conn the current connection (t.mu held) and logs its loss, with the
// cause, when it happens; Publish reports the cause when it gives up waiting.
func (t *Transport) install(conn *amqp091.Connection) {
	t.dropIdle()
	if t.conn != nil && t.conn != t.userConn {
		_ = t.conn.Close()
	}
	t.conn, t.lastErr = conn, nil
	t.gen++
	clear(t.declared)
	lost := conn.NotifyClose(make(chan *amqp091.Error, 1))
	go func() {
		if err, ok := <-lost; ok && err != nil {
			t.log.Warn("amqp: connection lost", "cause", err)
			t.mu.Lock()
			t.lastErr = err
			t.mu.Unlock()
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
// the dial under way (or one it starts) and returns its error when it fails. A dial is
// bounded by connection_timeout, not by a caller: one giving up leaves it to the next.
func (t *Transport) connection(ctx context.Context) (*amqp091.Connection, uint64, error) {
	for waited := false; ; waited = true {
		t.mu.Lock()
		conn, gen, closed, done, last := t.conn, t.gen, t.closed, t.dialing, t.lastErr
		live := conn != nil && !conn.IsClosed()
		if !closed && !live && !waited && done == nil && t.dial != nil {
			done = make(chan struct{})
			t.dialing = done
			go t.redial(done)
		}
		t.mu.Unlock()
		switch {
		case closed:
			return nil, 0, transport.ErrClosed
		case live:
			return conn, gen, nil
		case t.dial == nil:
			return nil, 0, errConnectionLost
		case waited:
			return nil, 0, unsentUnlessFinal(last)
		}
		select {
		case <-done:
		case <-ctx.Done():
			return nil, 0, unsent{ctx.Err()}
		}
	}
}

// redial opens a new connection and installs it, or records why it could not.
func (t *Transport) redial(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), t.s.connTimeout)
	conn, err := t.dial(ctx)
	cancel()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dialing = nil
	close(done)
	switch {
	case err != nil:
		t.lastErr = err
	case t.closed:
		_ = conn.Close()
	default:
		t.install(conn)
		t.log.Info("amqp: reconnected")
	}
}

// unsent wraps the error of a write that cannot have reached the broker (the connection
// was lost, or could not be made, before it was written): Publish makes it again.
type unsent struct{ err error }

func (e unsent) Error() string { return e.err.Error() }
func (e unsent) Unwrap() error { return e.err }

func isUnsent(err error) bool { return err != nil && errors.As(err, new(unsent)) }

// lostWith marks err, a step before a publish was written, unsent when conn or the
// channel was lost; a refusal by a live broker stays final.
func lostWith(conn *amqp091.Connection, err error) error {
	if errors.Is(err, amqp091.ErrClosed) || conn.IsClosed() {
		return unsent{err}
	}
	return err
}

// unsentUnlessFinal marks a failed dial's error unsent, unless dialling again cannot
// help: the broker refused the login, vhost or connection, or its certificate failed.
func unsentUnlessFinal(err error) error {
	var ae *amqp091.Error
	var cve *tls.CertificateVerificationError
	switch {
	case err == nil:
		return unsent{errNoConnection}
	case errors.As(err, &ae) && (ae.Code == amqp091.AccessRefused || ae.Code == amqp091.NotAllowed), errors.As(err, &cve),
		errors.Is(err, transport.ErrTLS), errors.Is(err, transport.ErrAuth):
		return err
	}
	return unsent{err}
}

// rideOut runs write until it succeeds or fails otherwise than unsent. Meanwhile it
// tries again after a backoff (50 ms doubling to 1 s) for up to the publish wait and
// until ctx ends, then fails with context.DeadlineExceeded (or ctx's error) wrapped with
// the broker's last error. write's argument bounds its wait for a connection. queue
// names the publish in errors ("" for a batch).
func (t *Transport) rideOut(ctx context.Context, queue string, write func(wait context.Context) error) error {
	t.mu.Lock()
	live, last := t.conn != nil && !t.conn.IsClosed(), error(nil)
	t.mu.Unlock()
	if live { // no connection to wait for: no wait to bound
		if last = write(ctx); !isUnsent(last) {
			return last
		}
	}
	wait, cancel := context.WithTimeout(ctx, t.s.publishWait)
	defer cancel()
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		err := write(wait)
		if !isUnsent(err) {
			return err
		}
		if wait.Err() == nil {
			last = err
			select {
			case <-wait.Done():
			case <-time.After(backoff):
				continue
			}
		}
		t.mu.Lock()
		last = cmp.Or(last, t.lastErr, error(errNoConnection))
		t.mu.Unlock()
		what := "a batch"
		if queue != "" {
			what = fmt.Sprintf("to %q", queue)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("amqp: publish %s: %w while waiting for the connection; the broker's last error: %w", what, err, last)
		}
		return fmt.Errorf("amqp: publish %s: no connection within %s (publish_wait): %w; the broker's last error: %w",
			what, t.s.publishWait, context.DeadlineExceeded, last)
	}
}

// declare declares queue (durable; classic, or quorum with queue_type=quorum) with args on conn, once per connection,
// on a channel of its own: a declare the broker refuses closes the channel.
func (t *Transport) declare(conn *amqp091.Connection, gen uint64, queue string, args amqp091.Table) error {
	t.mu.Lock()
	done := t.gen == gen && t.declared[queue]
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
	if t.gen == gen {
		t.declared[queue] = true
	}
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
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	err := t.consumers.Close(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropIdle()
	if t.conn != nil && t.conn != t.userConn && !t.conn.IsClosed() {
		err = errors.Join(err, t.conn.Close())
	}
	return err
}
