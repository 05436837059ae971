package artemis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/internal/settlepipe"
	"github.com/babelqueue-go/babelqueue/transport"
)

func init() {
	transport.Register("artemis", openURL)
	transport.Register("artemis+ssl", openURL)
}

func openURL(ctx context.Context, u *url.URL) (transport.Transport, error) {
	return OpenURL(ctx, u, WithLogger(transport.LoggerFrom(ctx)))
}

// Errors of this transport, beside the shared ones of package transport.
var (
	// ErrRejected matches a write that Artemis answered with an outcome other than
	// accepted (rejected, released, modified).
	ErrRejected = errors.New("artemis: write not accepted by the broker")
	// ErrDeliveryLost matches an acknowledgement that could not be made because the
	// link the delivery came on is gone; the broker redelivers the message.
	ErrDeliveryLost = errors.New("artemis: delivery lost with its link; the broker redelivers it")
)

// Option configures a [Transport].
type Option func(*options)

type options struct {
	logger         *slog.Logger
	dial           func(ctx context.Context) (*amqp.Conn, error)
	confirmTimeout time.Duration
	maxBackoff     time.Duration
	maxSize        int
	pipeline       bool
	tlsConfig      *tls.Config // WithTLSConfig (secure.go)
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithDial gives a transport built with [New] a way to dial a fresh connection after
// the one it was given drops. Without it, such a transport fails with the connection's
// error once the connection is gone.
func WithDial(dial func(ctx context.Context) (*amqp.Conn, error)) Option {
	return func(o *options) { o.dial = dial }
}

// WithConfirmTimeout bounds the wait for the broker to accept a write when the caller's
// context has no deadline (default 30s).
func WithConfirmTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.confirmTimeout = d
		}
	}
}

// WithMaxMessageSize makes a publish or settle write whose body is longer than n bytes
// fail with a [*transport.TooLargeError] before it is sent. Artemis itself sets no limit
// (it streams large messages) unless the link advertises one, which is then the
// default.
func WithMaxMessageSize(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxSize = n
		}
	}
}

// WithMaxBackoff caps the wait between reconnection attempts (default 2s: a consumer
// is back within about 2 s of the broker).
func WithMaxBackoff(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.maxBackoff = d
		}
	}
}

// WithPipelinedSettles sets whether the runtime's settle writes (retry, release, dead
// letter) are pipelined (default true). Pipelined, Settle sends the writes and returns
// without waiting for Artemis's outcomes; the delivery is accepted only once every
// write is accepted, and a write that is refused, fails, or is not accepted within the
// confirm timeout makes the transport give the delivery back to the broker itself
// (modified, not counted as a failed delivery; logged with its cause), so it is
// delivered again: nothing is lost, and a worker never waits for its own write. Not
// pipelined, Settle waits for the outcomes and returns a failed write as a
// [transport.SettleWriteError] (the runtime then rewinds the delivery), which costs the
// worker a round trip and the broker's journal sync per write. An Option given to
// [Open] or [OpenURL] overrides the URL's pipeline_settles.
func WithPipelinedSettles(on bool) Option {
	return func(o *options) { o.pipeline = on }
}

func buildOptions(opts []Option) options {
	o := options{logger: slog.Default(), confirmTimeout: 30 * time.Second, maxBackoff: 2 * time.Second, pipeline: true}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// dialTimeout bounds one reconnection attempt.
const dialTimeout = 15 * time.Second

// Config is what an artemis:// URL says, parsed by [ParseURL].
type Config struct {
	// Addr is the amqp:// or amqps:// address dialled, without credentials.
	Addr string
	// Username and Password are the SASL PLAIN credentials; both empty means ANONYMOUS.
	Username, Password string
	// HasCredentials reports that the URL held a user.
	HasCredentials bool
	// IdleTimeout is the AMQP idle timeout; negative disables it, zero is the default.
	IdleTimeout time.Duration
	// ContainerID is the AMQP container-id; empty is random.
	ContainerID string
	// TLS is set for artemis+ssl.
	TLS *tls.Config
	// PipelineSettles is the URL's pipeline_settles: true unless it is 0 (see
	// [WithPipelinedSettles]).
	PipelineSettles bool
}

// String describes the configuration without the password.
func (c Config) String() string {
	if c.HasCredentials {
		return fmt.Sprintf("%s (user %q)", c.Addr, c.Username)
	}
	return c.Addr
}

// ParseURL reads an artemis:// or artemis+ssl:// URL. Errors match
// [transport.ErrBadURL] and name the part at fault without echoing the password.
func ParseURL(u *url.URL) (Config, error) {
	scheme := strings.ToLower(u.Scheme)
	bad := func(param, reason string) (Config, error) {
		return Config{}, &transport.BadURLError{Scheme: scheme, Param: param, Reason: reason}
	}
	c := Config{PipelineSettles: true}
	var secure bool
	switch scheme {
	case "artemis":
	case "artemis+ssl":
		secure = true
	default:
		return bad("scheme", "want artemis:// or artemis+ssl://")
	}
	if u.Opaque != "" {
		return bad("host", "want artemis://host:port")
	}
	if err := transport.CheckParams(u, append([]string{"idle_timeout", "container_id", "server_name", "pipeline_settles"}, transport.TLSParams...)...); err != nil {
		return Config{}, err
	}
	host := u.Hostname()
	if host == "" {
		return bad("host", "missing (want artemis://host:port)")
	}
	port := u.Port()
	if port == "" {
		port = "5672"
		if secure {
			port = "5671"
		}
	} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return bad("port", "not a port number")
	}
	if u.Path != "" && u.Path != "/" {
		return bad("path", "artemis:// takes no path (queues are named by the runtime)")
	}
	if u.Fragment != "" {
		return bad("fragment", "artemis:// takes no fragment")
	}
	q, err := transport.ParseQuery(u)
	if err != nil {
		return Config{}, err
	}
	if d, ok, err := q.Duration("idle_timeout", time.Second, 0, 0); err != nil {
		return Config{}, err
	} else if ok {
		c.IdleTimeout = d
		if d == 0 {
			c.IdleTimeout = -1 // 0 disables it
		}
	}
	if id, ok, err := q.NonEmpty("container_id"); err != nil {
		return Config{}, err
	} else if ok {
		c.ContainerID = id
	}
	if on, ok, err := q.Bool("pipeline_settles"); err != nil {
		return Config{}, err
	} else if ok {
		c.PipelineSettles = on
	}
	// TLS: the shared grammar (transport.ParseTLS); server_name is tls_server_name.
	if c.TLS, err = transport.ParseTLS(u, secure, map[string]string{"server_name": transport.ParamTLSServerName}); err != nil {
		return Config{}, err
	}
	if u.User != nil {
		c.HasCredentials = true
		c.Username = u.User.Username()
		c.Password, _ = u.User.Password()
	}
	hostport := net.JoinHostPort(host, port)
	if secure {
		c.Addr = "amqps://" + hostport
		if c.TLS.ServerName == "" {
			c.TLS.ServerName = host
		}
	} else {
		c.Addr = "amqp://" + hostport
	}
	return c, nil
}

// ConnOptions returns the go-amqp options the configuration dials with.
func (c Config) ConnOptions() *amqp.ConnOptions {
	o := &amqp.ConnOptions{ContainerID: c.ContainerID, IdleTimeout: c.IdleTimeout, TLSConfig: c.TLS}
	if c.HasCredentials {
		o.SASLType = amqp.SASLTypePlain(c.Username, c.Password)
	} else {
		o.SASLType = amqp.SASLTypeAnonymous()
	}
	return o
}

// Open dials the broker of an artemis:// or artemis+ssl:// URL.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, badParse(err)
	}
	return OpenURL(ctx, u, opts...)
}

// DialURL dials the broker of an artemis:// or artemis+ssl:// URL and returns the bare
// go-amqp connection, for use with [New] and [WithDial] or on its own.
func DialURL(ctx context.Context, rawURL string) (*amqp.Conn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, badParse(err)
	}
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	conn, err := amqp.Dial(ctx, cfg.Addr, cfg.ConnOptions())
	if err != nil {
		return nil, fmt.Errorf("artemis: dial %s: %w", cfg, err)
	}
	return conn, nil
}

func badParse(err error) error {
	var ue *url.Error
	reason := "cannot parse URL"
	if errors.As(err, &ue) {
		reason = "cannot parse URL: " + ue.Err.Error()
	}
	return &transport.BadURLError{Scheme: "artemis", Param: "url", Reason: reason}
}

// OpenURL is [Open] for a parsed URL.
func OpenURL(ctx context.Context, u *url.URL, opts ...Option) (*Transport, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	o := buildOptions(append([]Option{WithPipelinedSettles(cfg.PipelineSettles)}, opts...))
	if o.tlsConfig != nil && cfg.TLS != nil {
		cfg.TLS = o.tlsConfig
	}
	transport.WarnInsecureTLS(o.logger, "artemis", transport.RedactURL(u), cfg.TLS)
	if o.dial == nil {
		o.dial = func(ctx context.Context) (*amqp.Conn, error) {
			return amqp.Dial(ctx, cfg.Addr, cfg.ConnOptions())
		}
	}
	conn, err := o.dial(ctx)
	if err != nil {
		return nil, transport.OpenFailed("artemis", transport.RedactURL(u), authCause(err))
	}
	return newTransport(conn, cfg.String(), o), nil
}

// New builds a transport around a connection the caller dialled (TLS, SASL of its
// choice). The transport owns conn from then on and closes it in Close. Give it
// [WithDial] to reconnect after the connection drops.
func New(conn *amqp.Conn, opts ...Option) *Transport {
	return newTransport(conn, "user-supplied connection", buildOptions(opts))
}

func newTransport(conn *amqp.Conn, desc string, o options) *Transport {
	return &Transport{opts: o, desc: desc, conn: conn, senders: map[string]*amqp.Sender{}, log: o.logger.With("transport", "artemis")}
}

// Transport is a connection to one Artemis broker. It is safe for concurrent use.
type Transport struct {
	opts options
	desc string
	log  *slog.Logger

	mu       sync.Mutex
	conn     *amqp.Conn // nil after a drop until redialled
	sess     *amqp.Session
	senders  map[string]*amqp.Sender
	closed   bool
	failures int // consecutive failed dials, for the back-off
	lastDial time.Time

	// pending counts the pipelined settlements of every consumer whose writes are not
	// yet answered; Close waits for them.
	pending settlepipe.Inflight
}

// Capabilities reports binding §7: attempts are the larger of the body's and the
// 0-based delivery-count, delays are scheduled by the broker, and the schema gate reads
// bq_schema_version.
func (t *Transport) Capabilities() transport.Capabilities {
	return transport.Capabilities{
		Attempts:         transport.AttemptsMaxNative,
		Delay:            true,
		SchemaGate:       true,
		DeadLetterSuffix: ".dlq",
		PublishConfirmed: true,
	}
}

// connection returns a live connection, dialling again when the last one dropped.
// t.mu must be held.
func (t *Transport) connectionLocked(ctx context.Context) (*amqp.Conn, error) {
	if t.closed {
		return nil, transport.ErrClosed
	}
	if t.conn != nil {
		select {
		case <-t.conn.Done():
			t.log.Warn("artemis: connection lost; reconnecting", "broker", t.desc, "err", t.conn.Err())
			t.dropLocked()
		default:
			return t.conn, nil
		}
	}
	if t.opts.dial == nil {
		return nil, fmt.Errorf("artemis: connection lost and no dial function to reconnect (use WithDial): %w", transport.ErrClosed)
	}
	if t.failures > 0 {
		wait := min(100*time.Millisecond<<min(t.failures, 10), t.opts.maxBackoff)
		if rest := time.Until(t.lastDial.Add(wait)); rest > 0 {
			timer := time.NewTimer(rest)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return nil, ctx.Err()
			}
		}
	}
	t.lastDial = time.Now()
	// Bounded, so a black-holed broker cannot hold the transport (and Close) forever.
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	conn, err := t.opts.dial(dctx)
	if err != nil {
		t.failures++
		return nil, fmt.Errorf("artemis: reconnect to %s: %w", t.desc, err)
	}
	t.failures = 0
	t.conn = conn
	t.log.Info("artemis: reconnected", "broker", t.desc)
	return conn, nil
}

// dropLocked forgets the connection and everything opened on it.
func (t *Transport) dropLocked() {
	if t.conn != nil {
		_ = t.conn.Close()
	}
	t.conn, t.sess = nil, nil
	clear(t.senders)
}

// session returns a new session on the live connection. Consumers take one each.
func (t *Transport) session(ctx context.Context) (*amqp.Session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	conn, err := t.connectionLocked(ctx)
	if err != nil {
		return nil, err
	}
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.noteErrLocked(err)
		return nil, fmt.Errorf("artemis: open session: %w", err)
	}
	return s, nil
}

// noteErrLocked drops the connection when err says it is gone.
func (t *Transport) noteErrLocked(err error) {
	var ce *amqp.ConnError
	if errors.As(err, &ce) {
		t.dropLocked()
	}
}

// sender returns the cached sender of queue, attaching it when needed.
func (t *Transport) sender(ctx context.Context, queue string) (*amqp.Sender, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.senders[queue]; ok {
		return s, nil
	}
	conn, err := t.connectionLocked(ctx)
	if err != nil {
		return nil, err
	}
	if t.sess == nil {
		s, err := conn.NewSession(ctx, nil)
		if err != nil {
			t.noteErrLocked(err)
			return nil, fmt.Errorf("artemis: open session: %w", err)
		}
		t.sess = s
	}
	s, err := t.sess.NewSender(ctx, queue, &amqp.SenderOptions{
		SettlementMode:     ptr(amqp.SenderSettleModeUnsettled),
		TargetCapabilities: []string{capabilityQueue},
		TargetDurability:   amqp.DurabilityNone,
	})
	if err != nil {
		var se *amqp.SessionError
		if errors.As(err, &se) {
			t.sess = nil
		}
		t.noteErrLocked(err)
		return nil, fmt.Errorf("artemis: attach sender to %q: %w", queue, authCause(err))
	}
	t.senders[queue] = s
	return s, nil
}

// forget drops a sender whose link failed, so the next write attaches a fresh one.
func (t *Transport) forget(queue string, s *amqp.Sender, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.senders[queue] == s {
		delete(t.senders, queue)
	}
	var se *amqp.SessionError
	if errors.As(err, &se) {
		t.sess = nil
	}
	t.noteErrLocked(err)
}

// linkGone reports that err means the link, session or connection is closed, so a
// fresh attach may succeed.
func linkGone(err error) bool {
	var (
		le *amqp.LinkError
		se *amqp.SessionError
		ce *amqp.ConnError
	)
	return errors.As(err, &le) || errors.As(err, &se) || errors.As(err, &ce)
}

// write sends m and waits until Artemis accepted it. A link that turns out to be dead
// is attached again once.
func (t *Transport) write(ctx context.Context, m *transport.Message) error {
	if m.Queue == "" {
		return errors.New("artemis: message has no queue")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.opts.confirmTimeout)
		defer cancel()
	}
	msg := toAMQP(m)
	var err error
	for try := 0; try < 2; try++ {
		var s *amqp.Sender
		s, err = t.sender(ctx, m.Queue)
		if err != nil {
			return err
		}
		limit := t.opts.maxSize
		if n := s.MaxMessageSize(); limit == 0 && n > 0 && n <= math.MaxInt32 {
			limit = int(n)
		}
		if err := transport.CheckSize("artemis", m.Queue, len(m.Body), limit); err != nil {
			return err
		}
		err = send(ctx, s, msg)
		if err == nil {
			return nil
		}
		if !linkGone(err) {
			return err
		}
		t.forget(m.Queue, s, err)
		if ctx.Err() != nil {
			break
		}
	}
	return err
}

// send transfers msg unsettled and waits for the broker's outcome: only accepted counts.
func send(ctx context.Context, s *amqp.Sender, msg *amqp.Message) error {
	r, err := s.SendWithReceipt(ctx, msg, nil)
	if err != nil {
		return fmt.Errorf("artemis: send to %q: %w", s.Address(), err)
	}
	state, err := r.Wait(ctx)
	if err != nil {
		return fmt.Errorf("artemis: confirm of write to %q: %w", s.Address(), err)
	}
	return accepted(s.Address(), state)
}

// Publish writes one message and returns once Artemis accepted it.
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	return t.write(ctx, m)
}

// Close waits, until ctx ends, for the pipelined settlements in flight (their
// deliveries are accepted once their writes are), then closes the connection.
// Deliveries not yet settled go back to the broker.
func (t *Transport) Close(ctx context.Context) error {
	t.pending.Wait(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	if t.conn == nil {
		return nil
	}
	done := make(chan error, 1)
	conn := t.conn
	go func() { done <- conn.Close() }()
	t.conn, t.sess = nil, nil
	clear(t.senders)
	select {
	case err := <-done:
		var ce *amqp.ConnError
		if errors.As(err, &ce) && ce.RemoteErr == nil {
			return nil
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
