package amqp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
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

// errConnectionLost is returned when a connection built by the user died and no
// redial function was given.
var errConnectionLost = errors.New("amqp: connection lost and no redial function (use WithRedial)")

// Option configures a [Transport].
type Option func(*settings)

type settings struct {
	logger                                              *slog.Logger
	confirmTimeout, publishWait, heartbeat, connTimeout time.Duration
	noUserConfirm, noDeclare                            bool
	pipeline                                            bool // pipelined settle writes
	connName                                            string
	maxSize                                             int
	tlsConfig                                           *tls.Config
	dialer                                              func(ctx context.Context, network, addr string) (net.Conn, error)
	redial                                              func(ctx context.Context) (*amqp091.Connection, error)
	bad                                                 driverkit.Options
}

func defaultSettings() settings {
	return settings{confirmTimeout: DefaultConfirmTimeout, publishWait: DefaultPublishWait, heartbeat: DefaultHeartbeat,
		connTimeout: 30 * time.Second, pipeline: true, connName: "babelqueue-go", maxSize: DefaultMaxMessageSize,
		bad: driverkit.Options{Broker: "amqp"}}
}

// duration is an option setting a duration above zero, or of zero or more with zeroOK;
// any other d is an error matching babelqueue.ErrInvalidOption naming option.
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

// WithTLSConfig sets the TLS configuration used for amqps:// URLs.
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
var ownParams = []string{"publish_confirms", "confirm_timeout", "connection_name", "declare", "pipeline_settles", "publish_wait"}

// clientParams are the RabbitMQ URI query parameters amqp091 reads; tlsParams those
// of them only amqps:// takes.
var (
	tlsParams    = []string{"certfile", "keyfile", "cacertfile", "server_name_indication"}
	clientParams = append([]string{"heartbeat", "connection_timeout", "channel_max", "auth_mechanism"}, tlsParams...)
)

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
	pq, err := driverkit.ParseQuery("amqp", u, append(append([]string(nil), clientParams...), ownParams...)...)
	if err != nil {
		return "", err
	}
	if n, err := strconv.Atoi(u.Port()); u.Port() != "" && (err != nil || n < 1 || n > 65535) {
		return "", bad("port", "not a port number (1-65535)")
	}
	if strings.Contains(u.Host, " ") {
		return "", bad("host", "contains a space")
	}
	if strings.Contains(strings.TrimPrefix(u.Path, "/"), "/") {
		return "", bad("vhost", "a vhost containing '/' must be percent-encoded (%2F)")
	}
	q := u.Query()
	if q.Has("certfile") != q.Has("keyfile") {
		return "", pq.Bad("certfile", "certfile and keyfile go together")
	}
	for _, p := range tlsParams {
		if scheme == "amqp" && q.Has(p) {
			return "", pq.Bad(p, "only meaningful with amqps://")
		}
	}
	if m, ok := pq.String("auth_mechanism"); ok && !slices.Contains([]string{"plain", "amqplain", "external"}, strings.ToLower(m)) {
		return "", pq.Bad("auth_mechanism", "want plain, amqplain or external")
	}
	if _, _, err := pq.Int("channel_max", 0, 65535); err != nil {
		return "", err
	}
	if n, ok, err := pq.Int("heartbeat", 0, 65535); err != nil {
		return "", err
	} else if ok {
		s.heartbeat = time.Duration(n) * time.Second
	}
	if n, ok, err := pq.Int("connection_timeout", 1, 1<<31-1); err != nil {
		return "", err
	} else if ok {
		s.connTimeout = time.Duration(n) * time.Millisecond
	}
	for _, p := range []struct {
		name     string
		field    *bool
		negative bool
	}{{"publish_confirms", &s.noUserConfirm, true}, {"declare", &s.noDeclare, true}, {"pipeline_settles", &s.pipeline, false}} {
		if b, ok, err := pq.Bool(p.name); err != nil {
			return "", err
		} else if ok {
			*p.field = b != p.negative
		}
	}
	for _, p := range []struct {
		name  string
		field *time.Duration
		least time.Duration
	}{{"confirm_timeout", &s.confirmTimeout, time.Millisecond}, {"publish_wait", &s.publishWait, 0}} {
		if d, ok, err := pq.Duration(p.name, time.Second, p.least, 0); err != nil {
			return "", err
		} else if ok {
			*p.field = d
		}
	}
	if name, ok := pq.String("connection_name"); ok {
		s.connName = name
	}
	c := *u
	c.Scheme = scheme
	c.Fragment, c.RawFragment = "", ""
	for _, p := range ownParams {
		q.Del(p)
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
	for _, o := range opts { // options given in code win over the URL
		o(&s)
	}
	if err := s.bad.Err(); err != nil {
		return nil, err
	}
	t := newTransport(s)
	t.dial = t.dialer(raw, u)
	conn, err := t.dial(ctx)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.install(conn)
	return t, nil
}

// dialer returns the function that opens a connection to raw with the transport's
// settings; u, redacted, names the broker in its errors.
func (t *Transport) dialer(raw string, u *url.URL) func(context.Context) (*amqp091.Connection, error) {
	s := &t.s
	// amqp091 takes the URL's heartbeat over its Config's, and reads a zero there as
	// "the broker's": the URL carries the heartbeat the settings ended with.
	c, _ := url.Parse(raw)
	q := c.Query()
	q.Set("heartbeat", strconv.FormatInt(int64((s.heartbeat+time.Second-1)/time.Second), 10))
	c.RawQuery = q.Encode()
	raw, redacted := c.String(), transport.RedactURL(u)
	return func(ctx context.Context) (*amqp091.Connection, error) {
		cfg := amqp091.Config{Properties: amqp091.NewConnectionProperties()}
		if s.tlsConfig != nil {
			cfg.TLSClientConfig = s.tlsConfig.Clone()
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
			// A deadline for the TLS and AMQP handshakes; amqp091 clears it once open.
			deadline, _ := ctx.Deadline()
			if err := conn.SetDeadline(deadline); err != nil {
				_ = conn.Close()
				return nil, err
			}
			live = &liveConn{Conn: conn}
			return live, nil
		}
		conn, err := amqp091.DialConfig(raw, cfg)
		if err != nil {
			return nil, fmt.Errorf("amqp: connect to %s: %w", redacted, scrub(err, u))
		}
		live.opened(conn.Config.Heartbeat)
		return conn, nil
	}
}

// scrub makes sure an error from the client never carries the URL's password.
func scrub(err error, u *url.URL) error {
	if pw, ok := u.User.Password(); ok && pw != "" && strings.Contains(err.Error(), pw) {
		return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
	}
	return err
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
	s := defaultSettings()
	for _, o := range opts {
		o(&s)
	}
	if err := s.bad.Err(); err != nil {
		return nil, err
	}
	t := newTransport(s)
	t.userConn, t.dial = conn, s.redial
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

// Capabilities reports what the RabbitMQ binding does: attempts from the body, delays
// through per-delay queues, no native delivery count.
func (t *Transport) Capabilities() transport.Capabilities {
	return transport.Capabilities{Attempts: transport.AttemptsFromBody, Delay: true, MaxDelay: MaxDelay,
		PublishConfirmed: !t.s.noUserConfirm}
}

// install makes conn the current connection (t.mu held) and watches it: its loss is
// logged when it happens, with the cause (a heartbeat that found it dead, a cut, the
// broker closing it), which Publish reports when it gives up waiting.
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

// connection returns a live connection and its generation. Without one it waits,
// until ctx ends, for a dial: the one under way, or one it starts. A dial is bounded by
// connection_timeout, not by its callers, so that one giving up leaves the result to
// the next. When the dial fails, connection returns its error.
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

// declare declares queue (durable, classic) with args on conn, once per connection,
// on a channel of its own: a declare the broker refuses closes the channel.
func (t *Transport) declare(conn *amqp091.Connection, gen uint64, queue string, args amqp091.Table) error {
	t.mu.Lock()
	done := t.gen == gen && t.declared[queue]
	t.mu.Unlock()
	if done {
		return nil
	}
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDeclare(queue, true, false, false, false, args)
		_ = ch.Close()
	}
	if err != nil {
		return lostWith(conn, fmt.Errorf("amqp: declare queue %q: %w", queue, err))
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
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropIdle()
	if t.conn != nil && t.conn != t.userConn && !t.conn.IsClosed() {
		err = errors.Join(err, t.conn.Close())
	}
	return err
}
