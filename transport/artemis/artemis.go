package artemis

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
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
	driverkit.Common // logger, connect timeout, size limit (0: none), bad values
	dial             func(ctx context.Context) (*amqp.Conn, error)
	confirmTimeout   time.Duration
	maxBackoff       time.Duration
	publishWait      time.Duration // WithPublishWait
	pipeline         bool
	tlsConfig        *tls.Config // WithTLSConfig (secure.go)
}

// WithLogger sets the logger (default slog.Default()). A nil l is an error matching
// babelqueue.ErrInvalidOption.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			o.Invalid("WithLogger", "the logger is nil")
		}
		o.SetLogger(l)
	}
}

// WithConnectTimeout bounds each dial, Open's and every reconnection (default
// [DefaultConnectTimeout]; connect_timeout in the URL). A d of zero or less is an error
// matching babelqueue.ErrInvalidOption.
func WithConnectTimeout(d time.Duration) Option { return func(o *options) { o.SetConnectTimeout(d) } }

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
	return func(o *options) { o.SetAtLeast("WithConfirmTimeout", &o.confirmTimeout, d, 1) }
}

// WithMaxMessageSize makes a publish or settle write whose body is longer than n bytes
// fail with a [*transport.TooLargeError] before it is sent. Artemis itself sets no limit
// (it streams large messages) unless the link advertises one, which is then the
// default (max_message_size in the URL). An n of zero or less is an error matching
// babelqueue.ErrInvalidOption.
func WithMaxMessageSize(n int) Option { return func(o *options) { o.SetMaxMessageSize(n) } }

// WithMaxBackoff caps the wait between reconnection attempts, and a consumer's backoff
// after failed receives and settlements (default 2s: a consumer is back within about
// 2 s of the broker). A d of zero or less is an error matching
// babelqueue.ErrInvalidOption.
func WithMaxBackoff(d time.Duration) Option {
	return func(o *options) { o.SetAtLeast("WithMaxBackoff", &o.maxBackoff, d, 1) }
}

// WithPipelinedSettles sets whether the runtime's settle writes (retry, release, dead
// letter) are pipelined (default true; overrides the URL's pipeline_settles): Settle
// sends them and returns, and the delivery is accepted once every write is, or given
// back when one is not. Not pipelined, Settle waits for the outcomes and returns a
// failed write as a [transport.SettleWriteError] (docs/transports/artemis.md, Settlement).
func WithPipelinedSettles(on bool) Option {
	return func(o *options) { o.pipeline = on }
}

// DefaultPublishWait is how long, by default, Publish waits for a connection to Artemis
// it cannot make ([WithPublishWait]).
const DefaultPublishWait = 30 * time.Second

// WithPublishWait bounds how long Publish waits for a connection to Artemis it cannot
// make (the URL's publish_wait; default [DefaultPublishWait]; zero fails at once;
// PublishConfirmed and settle writes do not wait), then fails with an error matching
// context.DeadlineExceeded, or its context's error, that wraps the last reconnection
// error. A negative d is an error matching babelqueue.ErrInvalidOption.
func WithPublishWait(d time.Duration) Option {
	return func(o *options) { o.SetAtLeast("WithPublishWait", &o.publishWait, d, 0) }
}

func buildOptions(opts []Option) (options, error) {
	o := options{Common: driverkit.NewCommon("artemis", DefaultConnectTimeout, 0, 0),
		confirmTimeout: 30 * time.Second, maxBackoff: 2 * time.Second, pipeline: true, publishWait: DefaultPublishWait}
	for _, f := range opts {
		f(&o)
	}
	return o, o.Err()
}

// DefaultConnectTimeout bounds a dial ([WithConnectTimeout]).
const DefaultConnectTimeout = 15 * time.Second

// DefaultIdleTimeout is the AMQP idle timeout a connection dialled from a URL asks for
// (idle_timeout; go-amqp's own default is a minute): a connection that carries no frame
// for this long is dead, logged at once, and the next publish or receive dials again.
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
	// ConnectTimeout and MaxMessageSize are the URL's connect_timeout
	// ([DefaultConnectTimeout] unless given) and max_message_size (0 unless given); see
	// [WithConnectTimeout] and [WithMaxMessageSize].
	ConnectTimeout time.Duration
	MaxMessageSize int
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
	secure := scheme == "artemis+ssl"
	if !secure && scheme != "artemis" {
		return bad("scheme", "want artemis:// or artemis+ssl://")
	}
	if u.Opaque != "" {
		return bad("host", "want artemis://host:port")
	}
	q, err := driverkit.ParseQuery("artemis", u, append(urlParams.Names(), append([]string{"server_name", "connect_timeout", "max_message_size"},
		transport.TLSParams...)...)...)
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
	if err := driverkit.RefuseParts(scheme, u,
		driverkit.URLPart{Part: "path", Param: "path", Reason: "artemis:// takes no path (queues are named by the runtime)"},
		driverkit.URLPart{Part: "fragment", Param: "fragment", Reason: "artemis:// takes no fragment"}); err != nil {
		return Config{}, err
	}
	sets, err := urlParams.Read(q)
	if err != nil {
		return Config{}, err
	}
	for _, set := range sets {
		set(&c)
	}
	common := driverkit.NewCommon("artemis", DefaultConnectTimeout, 0, 0)
	if err := common.Query(q); err != nil {
		return Config{}, err
	}
	c.ConnectTimeout, c.MaxMessageSize = common.ConnectTimeout, common.MaxMessageSize
	// TLS: the shared grammar (driverkit.Query.TLS); server_name is tls_server_name.
	if c.TLS, err = q.TLS(secure, map[string]string{"server_name": transport.ParamTLSServerName}); err != nil {
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

// urlParams are the URL parameters read into a Config.
var urlParams = driverkit.Params[func(*Config)]{
	{Name: "idle_timeout", Duration: func(d time.Duration) func(*Config) {
		return func(c *Config) { c.IdleTimeout = cmp.Or(d, -1) } // 0 disables it
	}},
	{Name: "container_id", String: func(id string) func(*Config) { return func(c *Config) { c.ContainerID = id } }},
	{Name: "publish_wait", Duration: func(d time.Duration) func(*Config) { return func(c *Config) { c.PublishWait = d } }, Hi: time.Hour},
	{Name: "pipeline_settles", Bool: func(on bool) func(*Config) { return func(c *Config) { c.PipelineSettles = on } }},
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
	u, err := driverkit.ParseURL("artemis", rawURL)
	if err != nil {
		return nil, err
	}
	return OpenURL(ctx, u, opts...)
}

// DialURL dials the broker of an artemis:// or artemis+ssl:// URL (the first of its
// nodes that takes the connection) and returns the bare go-amqp connection, for use
// with [New] and [WithDial] or on its own.
func DialURL(ctx context.Context, rawURL string) (*amqp.Conn, error) {
	u, err := driverkit.ParseURL("artemis", rawURL)
	if err != nil {
		return nil, err
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

// OpenURL is [Open] for a parsed URL.
func OpenURL(ctx context.Context, u *url.URL, opts ...Option) (*Transport, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	// ParseURL always sets ConnectTimeout; MaxMessageSize only when the URL gives one.
	urlOpts := []Option{WithPipelinedSettles(cfg.PipelineSettles), WithPublishWait(cfg.PublishWait), WithConnectTimeout(cfg.ConnectTimeout)}
	if cfg.MaxMessageSize > 0 {
		urlOpts = append(urlOpts, WithMaxMessageSize(cfg.MaxMessageSize))
	}
	o, err := buildOptions(append(urlOpts, opts...))
	if err != nil {
		return nil, err
	}
	if o.tlsConfig != nil && cfg.TLS != nil {
		cfg.TLS, cfg.serverName = o.tlsConfig, o.tlsConfig.ServerName != ""
	}
	transport.WarnInsecureTLS(o.Logger, "artemis", transport.RedactURL(u), cfg.TLS)
	if o.dial == nil {
		nodes := driverkit.NewFailover(cfg.Nodes)
		o.dial = func(ctx context.Context) (*amqp.Conn, error) {
			conn, node, moved, err := cfg.dial(ctx, nodes)
			if moved {
				o.Logger.Info("artemis: connected to another node of the cluster", "broker", cfg.String(), "node", node)
			}
			return conn, err
		}
	}
	dctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
	defer cancel()
	conn, err := o.dial(dctx)
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
	t := &Transport{opts: o, desc: desc, senders: map[string]*amqp.Sender{}, log: o.Logger.With("transport", "artemis"),
		dupPrefix: "bq-" + rand.Text() + "-"}
	t.conn = driverkit.Redialer[*amqp.Conn]{
		Live:      func(c *amqp.Conn) bool { return c.Err() == nil },
		Installed: t.installed,
		Release:   func(c *amqp.Conn) { _ = c.Close() },
		Timeout:   o.ConnectTimeout,
		Backoff:   driverkit.Backoff{Min: 200 * time.Millisecond, Max: o.maxBackoff},
		Unrecoverable: fmt.Errorf("artemis: connection lost and no dial function to reconnect (use WithDial): %w",
			transport.ErrClosed),
	}
	if o.dial != nil {
		t.conn.Dial = func(ctx context.Context) (*amqp.Conn, error) {
			conn, err := o.dial(ctx)
			if err != nil {
				return nil, driverkit.Unsent(fmt.Errorf("artemis: reconnect to %s: %w", desc, err))
			}
			return conn, nil
		}
	}
	t.conn.Start(conn)
	return t
}

// installed closes old, the connection lost, and logs the loss of conn (closed, or silent
// for the idle timeout) when it happens, unless the transport's Close closed it.
func (t *Transport) installed(old, conn *amqp.Conn) {
	if old != nil {
		_ = old.Close()
		t.log.Info("artemis: reconnected", "broker", t.desc)
	}
	go func() {
		<-conn.Done()
		if !t.conn.Closed() {
			t.log.Warn("artemis: connection lost; the next publish or receive dials again", "broker", t.desc, "err", conn.Err())
		}
	}()
}

// Transport is a connection to one Artemis broker. It is safe for concurrent use.
type Transport struct {
	opts options
	desc string
	log  *slog.Logger
	// conn is dialled again when lost (the next publish or receive dials, backing off
	// after failed dials up to WithMaxBackoff); Close abandons a dial under way.
	conn      driverkit.Redialer[*amqp.Conn]
	consumers driverkit.Group // the consumers open; Close closes them

	mu      sync.Mutex
	gen     uint64        // the generation of the connection of sess and senders
	sess    *amqp.Session // the senders' session
	senders map[string]*amqp.Sender
	closed  bool

	// dupPrefix and dupSeq make the duplicate ids of writes (confirm.go).
	dupPrefix string
	dupSeq    atomic.Uint64
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

// session returns a new session on the live connection. Consumers take one each.
func (t *Transport) session(ctx context.Context) (*amqp.Session, error) {
	conn, _, err := t.conn.Get(ctx)
	if err != nil {
		return nil, err
	}
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.noteErr(conn, err)
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

// noteErr drops conn when err says it is gone (nil conn: the one held).
func (t *Transport) noteErr(conn *amqp.Conn, err error) {
	if errors.As(err, new(*amqp.ConnError)) {
		if conn == nil {
			conn, _, _ = t.conn.Current()
		}
		t.conn.Drop(conn)
	}
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
	conn, gen, err := t.conn.Get(ctx)
	if err != nil {
		return nil, err
	}
	if gen != t.gen { // a new connection: what was opened on the last one is gone
		t.gen, t.sess = gen, nil
		clear(t.senders)
	}
	if s, ok := t.senders[queue]; ok {
		return s, nil
	}
	if t.sess == nil {
		if t.sess, err = conn.NewSession(ctx, nil); err != nil {
			t.noteErr(conn, err)
			return nil, fmt.Errorf("artemis: open session: %w", err)
		}
	}
	s, err := t.sess.NewSender(ctx, queue, &amqp.SenderOptions{
		SettlementMode:     amqp.SenderSettleModeUnsettled.Ptr(),
		TargetCapabilities: []string{capabilityQueue},
		TargetDurability:   amqp.DurabilityNone,
	})
	if err != nil {
		var se *amqp.SessionError
		if errors.As(err, &se) {
			t.sess = nil
		}
		t.noteErr(conn, err)
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
	t.noteErr(nil, err)
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
// connection it cannot make ([WithPublishWait]): a publish whose reconnection failed
// ([driverkit.Unsent]: nothing was sent) is made again, 50 ms doubling to 1 s between
// ([driverkit.RideOut]).
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	dup := t.duplicateID() // one for every try: a copy stored before the link dropped is not stored again
	return driverkit.RideOut(ctx, "artemis", t.opts.publishWait, driverkit.Backoff{Min: 50 * time.Millisecond, Max: time.Second},
		driverkit.IsUnsent,
		func(ctx context.Context) error { return t.write(ctx, m, dup) })
}

// Close closes the transport's consumers ([driverkit.Group.Close]: each waits, until
// ctx ends, for its pipelined settlements in flight, and detaches), then the connection;
// deliveries not yet settled go back to the broker. It returns nil, or the errors of both
// steps joined. A reconnection under way is abandoned once ctx ends, and once the
// consumers are closed, so Close returns within ctx whatever the connection is doing.
func (t *Transport) Close(ctx context.Context) error {
	conn := t.conn.Close() // a dial under way is abandoned
	err := t.consumers.Close(ctx)
	t.mu.Lock()
	closed := t.closed
	t.closed, t.sess = true, nil
	clear(t.senders)
	t.mu.Unlock()
	if closed || conn == nil || conn.Err() != nil {
		return err
	}
	_, cerr := driverkit.Await(ctx, func() (struct{}, error) { return struct{}{}, conn.Close() }, nil)
	if ce := (*amqp.ConnError)(nil); errors.As(cerr, &ce) && ce.RemoteErr == nil {
		return err // closed by us: no error of the broker's
	}
	return errors.Join(err, cerr)
}
