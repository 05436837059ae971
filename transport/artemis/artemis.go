package artemis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
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
	publishWait    time.Duration // WithPublishWait
	maxSize        int
	pipeline       bool
	bad            driverkit.Options // the bad values given to option functions
	tlsConfig      *tls.Config       // WithTLSConfig (secure.go)
}

// WithLogger sets the logger (default slog.Default()). A nil l is an error matching
// babelqueue.ErrInvalidOption.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			o.bad.Invalid("WithLogger", "the logger is nil")
			return
		}
		o.logger = l
	}
}

// WithDial gives a transport built with [New] a way to dial a fresh connection after
// the one it was given drops. Without it, such a transport fails with the connection's
// error once the connection is gone.
func WithDial(dial func(ctx context.Context) (*amqp.Conn, error)) Option {
	return func(o *options) { o.dial = dial }
}

// WithConfirmTimeout bounds the wait for the broker to accept a write, and for a
// disposition, when the caller's context has no deadline, and the wait of a pipelined
// settlement for its writes (default 30s). A d of zero or less is an error matching
// babelqueue.ErrInvalidOption.
func WithConfirmTimeout(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.bad.Invalid("WithConfirmTimeout", "want a duration above zero, got %s", d)
			return
		}
		o.confirmTimeout = d
	}
}

// WithMaxMessageSize makes a publish or settle write whose body is longer than n bytes
// fail with a [*transport.TooLargeError] before it is sent. Artemis itself sets no limit
// (it streams large messages) unless the link advertises one, which is then the
// default. An n of zero or less is an error matching babelqueue.ErrInvalidOption.
func WithMaxMessageSize(n int) Option {
	return func(o *options) {
		if n <= 0 {
			o.bad.Invalid("WithMaxMessageSize", "want a number of bytes above zero, got %d", n)
			return
		}
		o.maxSize = n
	}
}

// WithMaxBackoff caps the wait between reconnection attempts, and a consumer's backoff
// after failed receives and settlements (default 2s: a consumer is back within about
// 2 s of the broker). A d of zero or less is an error matching
// babelqueue.ErrInvalidOption.
func WithMaxBackoff(d time.Duration) Option {
	return func(o *options) {
		if d <= 0 {
			o.bad.Invalid("WithMaxBackoff", "want a duration above zero, got %s", d)
			return
		}
		o.maxBackoff = d
	}
}

// WithPipelinedSettles sets whether the runtime's settle writes (retry, release, dead
// letter) are pipelined (default true). Pipelined, Settle sends the writes and returns
// without waiting for Artemis's outcomes; the delivery is accepted only once every
// write is accepted, and a write that is refused, fails, or is not accepted within the
// confirm timeout makes the transport give the delivery back to the broker itself
// (modified, not counted as a failed delivery; logged with its cause, and the
// consumer's receives back off while writes keep failing), so it is delivered again:
// nothing is lost, and a worker never waits for its own write. Not
// pipelined, Settle waits for the outcomes and returns a failed write as a
// [transport.SettleWriteError] (the runtime then rewinds the delivery), which costs the
// worker a round trip and the broker's journal sync per write. An Option given to
// [Open] or [OpenURL] overrides the URL's pipeline_settles.
func WithPipelinedSettles(on bool) Option {
	return func(o *options) { o.pipeline = on }
}

func buildOptions(opts []Option) (options, error) {
	o := options{logger: slog.Default(), confirmTimeout: 30 * time.Second, maxBackoff: 2 * time.Second, pipeline: true,
		publishWait: DefaultPublishWait,
		bad:         driverkit.Options{Broker: "artemis"}}
	for _, f := range opts {
		f(&o)
	}
	return o, o.bad.Err()
}

// dialTimeout bounds one reconnection attempt.
const dialTimeout = 15 * time.Second

// DefaultIdleTimeout is the AMQP idle timeout a connection dialled from a URL asks for
// (idle_timeout): Artemis then sends a frame at least every half of it (an empty one on
// an idle connection), and a connection that carries none for this long is dead. It is
// closed then, logged, and the next publish or receive dials again: a consumer finds
// a silent connection within it; a Publish waiting for its outcome on one, about 10 s
// later (measured; not explained yet). go-amqp's own default is a minute.
const DefaultIdleTimeout = 5 * time.Second

// Config is what an artemis:// URL says, parsed by [ParseURL].
type Config struct {
	// Addr is the amqp:// or amqps:// address of the first node, without credentials.
	Addr string
	// Nodes are the host:port of every node the URL lists (one unless it names a
	// primary and its backups: artemis://h1:5672,h2:5672), dialled in turn.
	Nodes []string
	// Username and Password are the SASL PLAIN credentials; both empty means ANONYMOUS.
	Username, Password string
	// HasCredentials reports that the URL held a user.
	HasCredentials bool
	// IdleTimeout is the AMQP idle timeout; negative disables it, zero is
	// [DefaultIdleTimeout].
	IdleTimeout time.Duration
	// ContainerID is the AMQP container-id; empty is random.
	ContainerID string
	// TLS is set for artemis+ssl.
	TLS *tls.Config
	// serverName reports a TLS server name given in the URL; without it each node is
	// verified by its own host name.
	serverName bool
	// PipelineSettles is the URL's pipeline_settles: true unless it is 0 (see
	// [WithPipelinedSettles]).
	PipelineSettles bool
	// PublishWait is the URL's publish_wait: [DefaultPublishWait] unless given (see
	// [WithPublishWait]).
	PublishWait time.Duration
}

// String describes the configuration without the password.
func (c Config) String() string {
	addr := c.Addr
	if len(c.Nodes) > 1 {
		addr = strings.Join(c.addrs(), ",")
	}
	if c.HasCredentials {
		return fmt.Sprintf("%s (user %q)", addr, c.Username)
	}
	return addr
}

// addrs returns the amqp:// or amqps:// address of every node.
func (c Config) addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = c.addr(n)
	}
	return out
}

// addr returns the amqp:// or amqps:// address of node.
func (c Config) addr(node string) string {
	if c.TLS != nil {
		return "amqps://" + node
	}
	return "amqp://" + node
}

// ParseURL reads an artemis:// or artemis+ssl:// URL. Errors match
// [transport.ErrBadURL] and name the part at fault without echoing the password.
func ParseURL(u *url.URL) (Config, error) {
	scheme := strings.ToLower(u.Scheme)
	bad := func(param, reason string) (Config, error) {
		return Config{}, &transport.BadURLError{Scheme: scheme, Param: param, Reason: reason}
	}
	c := Config{PipelineSettles: true, PublishWait: DefaultPublishWait}
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
	q, err := driverkit.ParseQuery("artemis", u, append([]string{"idle_timeout", "container_id", "server_name", "pipeline_settles", "publish_wait"}, transport.TLSParams...)...)
	if err != nil {
		return Config{}, err
	}
	if u.Host == "" {
		return bad("host", "missing (want artemis://host:port or artemis://host1:port1,host2:port2)")
	}
	defaultPort := "5672"
	if secure {
		defaultPort = "5671"
	}
	if c.Nodes, err = driverkit.Hosts(u, defaultPort); err != nil {
		param := "host"
		if !strings.Contains(u.Host, ",") && u.Hostname() != "" && u.Port() != "" {
			param = "port" // one node, whose port is out of range
		}
		return bad(param, err.Error())
	}
	if u.Path != "" && u.Path != "/" {
		return bad("path", "artemis:// takes no path (queues are named by the runtime)")
	}
	if u.Fragment != "" {
		return bad("fragment", "artemis:// takes no fragment")
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
	if d, ok, err := q.Duration("publish_wait", time.Second, 0, time.Hour); err != nil {
		return Config{}, err
	} else if ok {
		c.PublishWait = d
	}
	if on, ok, err := q.Bool("pipeline_settles"); err != nil {
		return Config{}, err
	} else if ok {
		c.PipelineSettles = on
	}
	// TLS: the shared grammar (transport.ParseTLS); server_name is tls_server_name.
	if c.TLS, err = q.TLS(u, secure, map[string]string{"server_name": transport.ParamTLSServerName}); err != nil {
		return Config{}, err
	}
	if u.User != nil {
		c.HasCredentials = true
		c.Username = u.User.Username()
		c.Password, _ = u.User.Password()
	}
	if secure {
		c.serverName = c.TLS.ServerName != ""
		if !c.serverName {
			c.TLS.ServerName, _, _ = net.SplitHostPort(c.Nodes[0])
		}
	}
	c.Addr = c.addrs()[0]
	return c, nil
}

// ConnOptions returns the go-amqp options the configuration dials the first node with.
func (c Config) ConnOptions() *amqp.ConnOptions {
	o := &amqp.ConnOptions{ContainerID: c.ContainerID, IdleTimeout: c.IdleTimeout, TLSConfig: c.TLS}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if c.HasCredentials {
		o.SASLType = amqp.SASLTypePlain(c.Username, c.Password)
	} else {
		o.SASLType = amqp.SASLTypeAnonymous()
	}
	return o
}

// dial connects to the first of nodes that takes the connection, in turn
// ([driverkit.Failover]): a passive backup keeps its acceptors closed, so only the
// active node of a primary/backup pair answers. Each node is verified by its own host
// name unless the URL gave a TLS server name.
func (c Config) dial(ctx context.Context, nodes *driverkit.Failover) (conn *amqp.Conn, node string, moved bool, err error) {
	node, moved, err = nodes.Dial(ctx, func(ctx context.Context, node string) error {
		o := c.ConnOptions()
		if c.TLS != nil && !c.serverName {
			o.TLSConfig = c.TLS.Clone()
			o.TLSConfig.ServerName, _, _ = net.SplitHostPort(node)
		}
		var err error
		conn, err = amqp.Dial(ctx, c.addr(node), o)
		return err
	})
	return conn, node, moved, err
}

// Open dials the broker of an artemis:// or artemis+ssl:// URL.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Transport, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, badParse(err)
	}
	return OpenURL(ctx, u, opts...)
}

// DialURL dials the broker of an artemis:// or artemis+ssl:// URL (the first of its
// nodes that takes the connection) and returns the bare go-amqp connection, for use
// with [New] and [WithDial] or on its own.
func DialURL(ctx context.Context, rawURL string) (*amqp.Conn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, badParse(err)
	}
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	conn, _, _, err := cfg.dial(ctx, driverkit.NewFailover(cfg.Nodes))
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
	o, err := buildOptions(append([]Option{WithPipelinedSettles(cfg.PipelineSettles), WithPublishWait(cfg.PublishWait)}, opts...))
	if err != nil {
		return nil, err
	}
	if o.tlsConfig != nil && cfg.TLS != nil {
		cfg.TLS, cfg.serverName = o.tlsConfig, o.tlsConfig.ServerName != ""
	}
	transport.WarnInsecureTLS(o.logger, "artemis", transport.RedactURL(u), cfg.TLS)
	if o.dial == nil {
		nodes := driverkit.NewFailover(cfg.Nodes)
		o.dial = func(ctx context.Context) (*amqp.Conn, error) {
			conn, node, moved, err := cfg.dial(ctx, nodes)
			if moved {
				o.logger.Info("artemis: connected to another node of the cluster", "broker", cfg.String(), "node", node)
			}
			return conn, err
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
// [WithDial] to reconnect after the connection drops. A bad option value is an error
// matching babelqueue.ErrInvalidOption.
func New(conn *amqp.Conn, opts ...Option) (*Transport, error) {
	if conn == nil {
		return nil, errors.New("artemis: New: nil connection")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return newTransport(conn, "user-supplied connection", o), nil
}

func newTransport(conn *amqp.Conn, desc string, o options) *Transport {
	t := &Transport{opts: o, desc: desc, conn: conn, senders: map[string]*amqp.Sender{}, log: o.logger.With("transport", "artemis")}
	go t.watch(conn)
	return t
}

// watch logs the loss of conn when it happens rather than when the transport next uses
// it: the broker or the network closed it, or nothing came through it for the idle
// timeout (a dead connection: "i/o timeout"). Publishes and receives on it fail then;
// the next one dials again. A connection the transport's Close closes is not logged.
func (t *Transport) watch(conn *amqp.Conn) {
	<-conn.Done()
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if !closed {
		t.log.Warn("artemis: connection lost; the next publish or receive dials again", "broker", t.desc, "err", conn.Err())
	}
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

	consumers driverkit.Group // the consumers open; Close closes them
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
		case <-t.conn.Done(): // logged by watch
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
		return nil, &dialError{fmt.Errorf("artemis: reconnect to %s: %w", t.desc, err)}
	}
	t.failures = 0
	t.conn = conn
	go t.watch(conn)
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

// closeQuietly closes a session, bounded, ignoring the error.
func closeQuietly(s *amqp.Session) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Close(ctx)
}

// noteErrLocked drops the connection when err says it is gone.
func (t *Transport) noteErrLocked(err error) {
	var ce *amqp.ConnError
	if errors.As(err, &ce) {
		t.dropLocked()
	}
}

// noteErr is noteErrLocked for a caller that does not hold t.mu.
func (t *Transport) noteErr(err error) {
	t.mu.Lock()
	t.noteErrLocked(err)
	t.mu.Unlock()
}

// bound returns ctx bounded by the confirm timeout when it has no deadline.
func (t *Transport) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, t.opts.confirmTimeout)
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

// Publish writes one message and returns once Artemis accepted it. It waits for a
// connection it cannot make ([WithPublishWait]).
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	return t.rideOut(ctx, func(ctx context.Context) error { return t.write(ctx, m) })
}

// Close closes the transport's consumers ([driverkit.Group.Close]: each waits, until
// ctx ends, for its pipelined settlements in flight, whose deliveries are accepted once
// their writes are, and detaches), then closes the connection. Deliveries not yet
// settled go back to the broker. It returns nil, or the errors of both steps joined.
func (t *Transport) Close(ctx context.Context) error {
	err := t.consumers.Close(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return err
	}
	t.closed = true
	if t.conn == nil {
		return err
	}
	done := make(chan error, 1)
	conn := t.conn
	go func() { done <- conn.Close() }()
	t.conn, t.sess = nil, nil
	clear(t.senders)
	select {
	case cerr := <-done:
		var ce *amqp.ConnError
		if errors.As(cerr, &ce) && ce.RemoteErr == nil {
			return err
		}
		return errors.Join(err, cerr)
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
}
