package console

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/transport"
)

// Broker is one broker the console shows, with the queues it is told about.
type Broker struct {
	// Name is how the console names the broker. Default: URL with its password
	// redacted, else the transport's Go type.
	Name string
	// URL is the broker's URL, used for its scheme and, redacted, as the default
	// Name. It never reaches a browser with its password. Optional.
	URL string
	// Transport is the connection to the broker. The console never closes it.
	Transport transport.Transport
	// Queues are the work queues to show, each with its dead-letter queue.
	Queues []Queue
}

// Queue is a work queue and its dead-letter queue.
type Queue struct {
	// Name is the work queue.
	Name string
	// DLQ is its dead-letter queue. Default: the name the runtime dead-letters to
	// on this broker (Name + ".dlq", Name + "-dlq" on SQS, before a .fifo suffix).
	DLQ string
}

// Option configures a [Console].
type Option func(*options)

type options struct {
	token      string
	basicUser  string
	basicPass  string
	readOnly   bool
	log        *slog.Logger
	sample     time.Duration
	samples    int
	stale      time.Duration
	maxIndexed int
	prewarm    bool
	tls        *tls.Config // WithTLSConfig (tls.go)
}

// WithToken requires a login with token (and a name, for the audit log) before any
// page is shown. The token is compared in constant time and never logged.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithBasicAuth requires HTTP basic authentication with this user and password; the
// user name is the one the audit log records.
func WithBasicAuth(user, password string) Option {
	return func(o *options) { o.basicUser, o.basicPass = user, password }
}

// WithReadOnly refuses every action (redrives, deletions, exports and their dry
// runs) and hides them from the pages.
func WithReadOnly() Option { return func(o *options) { o.readOnly = true } }

// WithLogger sets the logger of the audit lines (logins, redrives with who made them)
// and of broker trouble. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithSampleInterval sets how often each queue is counted for the rates and charts
// of the overview (default 5s; the console keeps the last 120 samples of each).
func WithSampleInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.sample = d
		}
	}
}

// WithStaleAfter sets how old the index of a dead-letter queue may grow while it is
// looked at before it is read again in the background (default 10s): once the
// broker's count of the queue moved, or, where the broker cannot count, at once (and
// at the latest after two minutes). The page shows the index it has at once, with
// its age.
func WithStaleAfter(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.stale = d
		}
	}
}

// WithMaxIndexed bounds how many messages of one dead-letter queue the console
// indexes (default 250,000): beyond it the groups count the first ones and say so.
func WithMaxIndexed(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxIndexed = n
		}
	}
}

// WithoutPrewarm leaves each dead-letter queue unread until its page is first asked
// for. By default [New] starts indexing every dead-letter queue at once, so their
// pages answer from the index.
func WithoutPrewarm() Option { return func(o *options) { o.prewarm = false } }

// ErrAuthRequired is returned by [Console.ListenAndServe] for an address beyond
// loopback when the console was built without [WithToken] or [WithBasicAuth].
var ErrAuthRequired = errors.New("console: listening beyond loopback needs a login: use a token or basic auth")

// Console is the web console: an [http.Handler] that serves its pages, their
// assets (embedded) and the JSON endpoints they call. Build it with [New] and
// [Console.Close] it when done.
type Console struct {
	o       options
	brokers []*brokerState
	mux     *http.ServeMux
	handler http.Handler
	auth    *authenticator
	jobs    *jobs

	ctx    context.Context // ends at Close: samplers, index builds, redrives
	cancel context.CancelFunc
	bgMu   sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

type brokerState struct {
	id     int
	name   string
	scheme string
	tr     transport.Transport
	queues []Queue
	// known holds every queue the console may touch on this broker: the work queues
	// and their dead-letter queues.
	known map[string]queueRole

	mu      sync.Mutex
	samples map[string]*ring
	lastErr string
	errAt   time.Time
	indexes map[string]*index
}

type queueRole struct {
	dlq  bool
	work string // for a dead-letter queue: its work queue
	dead string // for a work queue: its dead-letter queue
}

// New builds a console over brokers and starts counting their queues. Each broker
// needs a transport and at least one queue.
func New(brokers []Broker, opts ...Option) (*Console, error) {
	o := options{log: slog.Default(), sample: 5 * time.Second, samples: 120, stale: 10 * time.Second, maxIndexed: 250_000, prewarm: true}
	for _, f := range opts {
		f(&o)
	}
	if o.token != "" && o.basicUser != "" {
		return nil, errors.New("console: choose a token or basic auth, not both")
	}
	if o.basicUser != "" && o.basicPass == "" || o.basicUser == "" && o.basicPass != "" {
		return nil, errors.New("console: basic auth needs a user and a password")
	}
	if strings.ContainsRune(o.basicUser, ':') {
		return nil, errors.New("console: a basic-auth user name cannot hold a colon")
	}
	if len(brokers) == 0 {
		return nil, errors.New("console: no broker")
	}
	c := &Console{o: o}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for i, b := range brokers {
		if b.Transport == nil {
			c.cancel()
			return nil, fmt.Errorf("console: broker %d has no transport", i+1)
		}
		if len(b.Queues) == 0 {
			c.cancel()
			return nil, fmt.Errorf("console: broker %s has no queue (name at least one)", brokerName(b))
		}
		st := &brokerState{id: i, name: brokerName(b), tr: b.Transport, known: map[string]queueRole{},
			samples: map[string]*ring{}, indexes: map[string]*index{}}
		if b.URL != "" {
			if s, _, ok := strings.Cut(b.URL, "://"); ok {
				st.scheme = strings.ToLower(s)
			}
		}
		for _, q := range b.Queues {
			if q.Name == "" {
				c.cancel()
				return nil, fmt.Errorf("console: broker %s: a queue has no name", st.name)
			}
			if q.DLQ == "" {
				q.DLQ = dlq.QueueFor(q.Name, b.Transport.Capabilities())
			}
			if q.DLQ == q.Name {
				c.cancel()
				return nil, fmt.Errorf("console: broker %s: queue %q is its own dead-letter queue", st.name, q.Name)
			}
			st.queues = append(st.queues, q)
			work := st.known[q.Name]
			work.dead = q.DLQ
			st.known[q.Name] = work
			dead := st.known[q.DLQ]
			dead.dlq, dead.work = true, q.Name
			st.known[q.DLQ] = dead
			for _, name := range []string{q.Name, q.DLQ} {
				st.samples[name] = newRing(o.samples)
			}
		}
		c.brokers = append(c.brokers, st)
	}
	c.auth = newAuthenticator(&c.o)
	c.jobs = newJobs()
	c.routes()
	c.background(c.sampleLoop)
	if o.prewarm {
		for _, b := range c.brokers {
			for _, q := range b.queues {
				c.indexOf(b, q.DLQ).refresh()
			}
		}
	}
	return c, nil
}

func brokerName(b Broker) string {
	switch {
	case b.Name != "":
		return b.Name
	case b.URL != "":
		return transport.Redact(b.URL)
	default:
		return fmt.Sprintf("%T", b.Transport)
	}
}

// ServeHTTP serves the console. Without a token or basic auth it answers loopback
// clients only, and only requests addressed to a loopback host name (so that a web
// page cannot reach it by rebinding a name of its own to 127.0.0.1).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

// Close stops the sampling, the index builds, the live tails and the redrives under
// way (each settles the message in hand and stops) and waits for them. It does not
// close the brokers' transports. A second call does nothing.
func (c *Console) Close() error {
	c.bgMu.Lock()
	c.closed = true
	c.bgMu.Unlock()
	c.cancel()
	c.wg.Wait()
	return nil
}

// background runs f on a goroutine that Close waits for; after Close it runs
// nothing and returns false.
func (c *Console) background(f func()) bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// ListenAndServe serves the console on addr, over HTTPS with [WithTLSConfig], until ctx
// ends, then closes the console
// (as [Console.Close]: live tails end, a redrive under way settles the message in
// hand and stops) and shuts the server down. An address beyond loopback is refused
// with [ErrAuthRequired] unless the console has a token or basic auth. ready, when
// not nil, is called with the address listened on (useful with port 0).
func (c *Console) ListenAndServe(ctx context.Context, addr string, ready func(net.Addr)) error {
	if !c.auth.enabled() && !IsLoopback(addr) {
		return fmt.Errorf("%w (address %q)", ErrAuthRequired, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(c.o.log.Handler(), slog.LevelWarn), TLSConfig: c.o.tls}
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			errc <- srv.ServeTLS(ln, "", "") // the certificates are in the configuration
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	_ = c.Close() // ends the live tails, which would hold Shutdown up
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return nil
}

// IsLoopback reports whether a listen address (host:port) binds to loopback only:
// 127.0.0.0/8, ::1 or localhost. An empty host (all interfaces) is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// broker returns the broker of a request's b parameter.
func (c *Console) broker(r *http.Request) (*brokerState, error) {
	n, err := strconv.Atoi(r.URL.Query().Get("b"))
	if err != nil || n < 0 || n >= len(c.brokers) {
		return nil, &requestError{status: http.StatusNotFound, msg: "no such broker"}
	}
	return c.brokers[n], nil
}

// queue returns the broker and queue of a request's b and q parameters: a queue the
// console was told about, or an error.
func (c *Console) queue(r *http.Request) (*brokerState, string, queueRole, error) {
	b, err := c.broker(r)
	if err != nil {
		return nil, "", queueRole{}, err
	}
	q := r.URL.Query().Get("q")
	role, ok := b.known[q]
	if !ok {
		return nil, "", queueRole{}, &requestError{status: http.StatusNotFound, msg: fmt.Sprintf("the console does not know a queue %q on %s", q, b.name)}
	}
	return b, q, role, nil
}

// requestError is an error with the HTTP status it answers with.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return e.msg }

// leavesMarks reports whether browsing a queue of this broker leaves a trace a
// worker sees: SQS counts a receive of every message, RabbitMQ flags them
// redelivered. The console browses only dead-letter queues there.
func (b *brokerState) leavesMarks() bool {
	switch b.scheme {
	case "sqs", "amqp", "amqps":
		return true
	}
	return false
}

// marksWarning says why a work queue of b is not browsed.
func (b *brokerState) marksWarning() string {
	if b.scheme == "sqs" {
		return "SQS can only be read by receiving: browsing a work queue counts a receive of every message (attempts, RedrivePolicy)"
	}
	return "RabbitMQ can only be read by getting and requeueing: browsing a work queue flags every message redelivered"
}

// scanPage is how many messages an index build reads per browse call: brokers whose
// browse of a page reads every message in front of it (RabbitMQ, Artemis) or walks
// the whole queue (SQS) are read in one page.
func (b *brokerState) scanPage(maxIndexed int) int {
	switch b.scheme {
	case "sqs", "amqp", "amqps", "artemis", "artemis+ssl":
		return maxIndexed
	}
	return 5000
}
