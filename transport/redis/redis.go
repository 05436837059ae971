package redis

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

func init() {
	transport.Register("redis", open)
	transport.Register("rediss", open)
}

// DefaultRetryAfter is the visibility timeout of a reservation when none is configured.
const DefaultRetryAfter = 60 * time.Second

// DefaultPrefix is the key prefix of the Laravel layout.
const DefaultPrefix = "queues:"

// ErrReservationLost is returned by Settle when the delivery's reservation lapsed and was
// handed back to the queue (by this or another worker's sweep) before it was settled:
// nothing was written and the message will be (or was) delivered again.
var ErrReservationLost = errors.New("redis: reservation lapsed before it was settled")

// ours lists the query parameters this package reads itself.
var ours = []string{"cluster", "deferred_acks", "laravel", "prefix", "publish_wait", "retry_after", "sentinel", "wait", "wait_timeout"}

// goRedisParams lists the go-redis connection parameters accepted in a URL.
var goRedisParams = []string{
	"client_name", "conn_max_idle_time", "conn_max_lifetime", "conn_max_lifetime_jitter", "db",
	"dial_timeout", "idle_timeout", "max_active_conns", "max_concurrent_dials", "max_conn_age",
	"max_idle_conns", "max_retries", "max_retry_backoff", "min_idle_conns", "min_retry_backoff",
	"pipeline_pool_size", "pipeline_read_buffer_size", "pipeline_write_buffer_size", "pool_fifo",
	"pool_size", "pool_timeout", "protocol", "read_timeout", "skip_verify", "write_timeout",
}

func open(ctx context.Context, u *url.URL) (transport.Transport, error) {
	opts, cfg, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	tlsConfig := cfg.tlsConfig()
	var certWatch *transport.ClientCertWatch
	*tlsConfig, certWatch = transport.WatchClientCert(*tlsConfig)
	client := cfg.newClient()
	routeClientLog(transport.LoggerFrom(ctx))
	t, err := New(client, append([]Option{WithLogger(transport.LoggerFrom(ctx))}, opts...)...)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	t.owned = true
	transport.WarnInsecureTLS(t.log, "redis", transport.RedactURL(u), *tlsConfig)
	if err := checkTLS(ctx, cfg.plain); err != nil {
		_ = client.Close()
		return nil, transport.OpenFailed("redis", transport.RedactURL(u), err)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, transport.OpenFailed("redis", transport.RedactURL(u), authCause(certWatch.Explain(err)))
	}
	return t, nil
}

// parseURL splits u into this package's options and the go-redis client options.
func parseURL(u *url.URL) ([]Option, *clientConfig, error) {
	scheme := strings.ToLower(u.Scheme)
	lu := *u
	lu.Scheme = scheme
	pq, err := driverkit.ParseQuery("redis", &lu, append(append(append([]string{}, ours...), goRedisParams...), transport.TLSParams...)...)
	if err != nil {
		return nil, nil, err
	}
	// TLS: the shared grammar (transport.ParseTLS); go-redis's skip_verify is tls_insecure.
	tlsConfig, err := pq.TLS(&lu, scheme == "rediss", map[string]string{"skip_verify": transport.ParamTLSInsecure})
	if err != nil {
		return nil, nil, err
	}
	var opts []Option
	laravel := false
	if v, _ := pq.String("laravel"); v != "" {
		if laravel, _, err = pq.Bool("laravel"); err != nil {
			return nil, nil, err
		}
	}
	if prefix, ok := pq.String("prefix"); ok {
		if !laravel {
			return nil, nil, pq.Bad("prefix", "only applies with laravel=1")
		}
		opts = append(opts, WithLaravel(prefix))
	} else if laravel {
		opts = append(opts, WithLaravel(DefaultPrefix))
	}
	if v, ok := pq.String("retry_after"); ok && (strings.EqualFold(v, "null") || strings.EqualFold(v, "none")) {
		opts = append(opts, WithRetryAfter(0))
	} else if d, ok, err := pq.Duration("retry_after", time.Second, time.Millisecond, 0); err != nil {
		return nil, nil, err
	} else if ok {
		opts = append(opts, WithRetryAfter(d))
	}
	if d, ok, err := pq.Duration("publish_wait", time.Second, 0, time.Hour); err != nil {
		return nil, nil, err
	} else if ok {
		opts = append(opts, WithPublishWait(d))
	}
	if d, ok, err := pq.Duration("deferred_acks", time.Millisecond, 0, time.Minute); err != nil {
		return nil, nil, err
	} else if ok {
		opts = append(opts, WithDeferredAcks(d))
	}
	if o, err := parseWait(pq); err != nil {
		return nil, nil, err
	} else if o != nil {
		opts = append(opts, o)
	}
	q := u.Query()
	for _, k := range append(append([]string{"skip_verify"}, ours...), transport.TLSParams...) {
		q.Del(k)
	}
	c := *u
	c.Scheme = scheme
	c.RawQuery = q.Encode()
	cfg, err := parseNodes(pq, &c)
	if err != nil {
		return nil, nil, err
	}
	if tlsConfig != nil {
		if tlsConfig.ServerName == "" && cfg.plain != nil {
			tlsConfig.ServerName = u.Hostname() // several nodes: each dial names its own host
		}
		*cfg.tlsConfig() = tlsConfig
	}
	return opts, cfg, nil
}

// goRedisError is the URL error of a go-redis URL parser's message, naming the parameter
// at fault when the message does.
func goRedisError(pq driverkit.Query, err error) error {
	param := "url"
	msg := err.Error()
	switch {
	case strings.Contains(msg, "database"), strings.Contains(msg, "path"):
		param = "db"
	default:
		for _, p := range goRedisParams {
			if strings.Contains(msg+" ", " "+p+" ") {
				param = p
			}
		}
	}
	// go-redis messages name the part at fault; none of them echo the password.
	return pq.Bad(param, strings.TrimPrefix(msg, "redis: "))
}

// Option configures a [Transport]. An option given a value it cannot use makes [New]
// (and Open) fail with an error naming it that matches babelqueue.ErrInvalidOption.
type Option func(*Transport)

// WithLaravel selects the Laravel-compatible layout with the given key prefix (""
// means no prefix; the URL default is [DefaultPrefix]).
func WithLaravel(prefix string) Option {
	return func(t *Transport) {
		t.laravel = true
		t.prefix = prefix
	}
}

// WithRetryAfter sets the visibility timeout: a reservation not settled within d goes
// back to the queue. Zero turns recovery off (the reservation never lapses); a negative
// d is an error. Default [DefaultRetryAfter].
func WithRetryAfter(d time.Duration) Option {
	return func(t *Transport) {
		if d < 0 {
			t.bad.Invalid("WithRetryAfter", "want a duration of zero (no recovery) or more, got %s", d)
			return
		}
		t.retryAfter = d
	}
}

// WithPollInterval bounds how long a waiting consumer blocks on Redis before it looks
// at the delayed set and lapsed reservations again; d must be above zero. Default one
// second.
func WithPollInterval(d time.Duration) Option {
	return func(t *Transport) {
		if d <= 0 {
			t.bad.Invalid("WithPollInterval", "want a duration above zero, got %s", d)
			return
		}
		t.poll = d
	}
}

// WithLogger sets the logger for conditions that are not errors of a call (a dropped
// header, a reconnect). Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(t *Transport) {
		if l != nil {
			t.log = l
		}
	}
}

// WithBatch bounds how many messages one reserve script takes at once for one consumer
// (never more than the room its prefetch leaves); n must be 1 or more. Default 16.
func WithBatch(n int) Option {
	return func(t *Transport) {
		if n < 1 {
			t.bad.Invalid("WithBatch", "want 1 or more, got %d", n)
			return
		}
		t.batch = n
	}
}

// WithDeferredAcks makes an Ack without writes return at once: the removal of the
// reservation goes to Redis in the consumer's next reserve script call, in the same
// round trip, or after linger when no reserve call comes first, and always before the
// consumer's Close returns. It saves a round trip per message.
//
// What it costs: the message stays reserved until the removal lands, so a worker that
// dies in that window (at most linger, or while Redis is unreachable) leaves it to be
// delivered again after retry_after, as it would if it died just before acking; and an
// ack whose reservation had already lapsed is logged instead of returned as
// [ErrReservationLost]. A removal that fails is sent again with the next reserve call or
// after linger. Retries, dead-letters and rewinds stay synchronous. [transport.SyncAcks]
// sends the deferred acks at once. Zero (the default) turns it off; a negative linger
// is an error.
func WithDeferredAcks(linger time.Duration) Option {
	return func(t *Transport) {
		if linger < 0 {
			t.bad.Invalid("WithDeferredAcks", "want a linger of zero (off) or more, got %s", linger)
			return
		}
		t.ackLinger = linger
	}
}

// MaxMessageSize is the longest element Redis stores by default: a string of 512 MiB
// (proto-max-bulk-len). It counts the stored element: the envelope, or the header frame
// around it.
const MaxMessageSize = 512 << 20

// WithMaxMessageSize sets the longest element a publish or settle write may store, for
// a Redis whose proto-max-bulk-len is lower than the default [MaxMessageSize]; n must be
// above zero. A longer message fails with a [*transport.TooLargeError] before it is
// sent.
func WithMaxMessageSize(n int) Option {
	return func(t *Transport) {
		if n < 1 {
			t.bad.Invalid("WithMaxMessageSize", "want a size above zero, got %d", n)
			return
		}
		t.maxSize = n
	}
}

// checkSize refuses an element longer than the limit.
func (t *Transport) checkSize(queue string, el []byte) error {
	return transport.CheckSize("redis", queue, len(el), t.maxSize)
}

// Transport is a connection to one Redis. It is safe for concurrent use.
type Transport struct {
	client      goredis.UniversalClient
	dials       dialWatch // the client's last failed dial (outage.go)
	owned       bool
	laravel     bool
	prefix      string
	retryAfter  time.Duration
	poll        time.Duration
	batch       int
	ackLinger   time.Duration
	maxSize     int
	log         *slog.Logger
	bad         driverkit.Options
	waitCap     time.Duration // the longest blocking look a pipeline's read timeout allows; 0: no bound
	cluster     bool          // a Redis Cluster: a queue's keys need a hash tag
	waitN       int           // WAIT for this many replicas after each write (0: no WAIT)
	waitFor     time.Duration // WAIT's timeout
	publishWait time.Duration // WithPublishWait

	mu        sync.Mutex
	closed    bool
	consumers driverkit.Group // the consumers opened, closed with the transport

	tokenPfx string
	tokenN   atomic.Uint64

	pushes committer[write] // plain publishes
}

// New builds a transport around a client the caller constructed and keeps owning:
// Close does not close it. A bad option value is an error naming the option, matching
// babelqueue.ErrInvalidOption.
func New(client goredis.UniversalClient, opts ...Option) (*Transport, error) {
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	t := &Transport{
		client:      client,
		retryAfter:  DefaultRetryAfter,
		publishWait: DefaultPublishWait,
		poll:        time.Second,
		batch:       16,
		maxSize:     MaxMessageSize,
		log:         slog.Default(),
		bad:         driverkit.Options{Broker: "redis"},
		tokenPfx:    hex.EncodeToString(seed[:]),
	}
	for _, o := range opts {
		o(t)
	}
	if err := t.bad.Err(); err != nil {
		return nil, err
	}
	if client != nil { // the URL grammar's tests build one without a client
		client.AddHook(&t.dials)
	}
	// A consumer's blocking look is pipelined with its reserve script, and go-redis reads
	// a pipeline's replies under the client's read timeout: the look stays well inside it.
	readTimeout := 3 * time.Second // go-redis's default, for a client of another kind
	switch c := client.(type) {
	case *goredis.Client:
		readTimeout = c.Options().ReadTimeout
	case *goredis.ClusterClient:
		readTimeout = c.Options().ReadTimeout
		t.cluster = true
	}
	if readTimeout > 0 {
		t.waitCap = readTimeout / 2
	}
	t.pushes.run = t.pushGroup
	t.pushes.lanes = groupLanes
	return t, nil
}

// Client returns the go-redis client the transport uses.
func (t *Transport) Client() goredis.UniversalClient { return t.client }

// Capabilities reports the Redis binding: attempts from the body, delays through a
// sorted set, poison always dead-lettered, DLQ suffix ".dlq".
func (t *Transport) Capabilities() transport.Capabilities {
	return transport.Capabilities{
		Attempts:               transport.AttemptsFromBody,
		Delay:                  true,
		PoisonAlwaysDeadLetter: true,
		DeadLetterSuffix:       ".dlq",
		PublishConfirmed:       true,
	}
}

// token returns a fresh reservation token: 32 lowercase hex digits, unique per
// transport (a random prefix and a counter).
func (t *Transport) token() string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], t.tokenN.Add(1))
	return t.tokenPfx + hex.EncodeToString(b[:])
}

// keys of a queue.
func (t *Transport) ready(q string) string {
	if t.laravel {
		return t.prefix + q
	}
	return q
}

// Keys of the default layout: processing list, deadlines zset, delayed zset.
func processingKey(q string) string { return q + ":processing" }
func deadlinesKey(q string) string  { return q + ":processing:deadlines" }
func delayedKey(ready string) string {
	return ready + ":delayed"
}

// Keys of the Laravel layout (given the ready key).
func reservedKey(ready string) string { return ready + ":reserved" }
func notifyKey(ready string) string   { return ready + ":notify" }

// headersKey is the Go-owned hash of the Laravel layout that keeps the out-of-band
// headers of a job (field: SHA-1 of the job, value: a JSON object), since a Laravel job
// cannot carry a frame.
func headersKey(ready string) string { return ready + ":bq-headers" }

// headersJSON encodes the non-blank headers as a JSON object, or "" when none.
func headersJSON(h map[string]string) string {
	kept := make(map[string]string, len(h))
	for k, v := range h {
		if k != "" && v != "" {
			kept[k] = v
		}
	}
	if len(kept) == 0 {
		return ""
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(kept) // a map of strings always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

func unixSeconds(tm time.Time) float64 {
	return float64(tm.UnixMilli()) / 1000
}

func fmtScore(f float64) string {
	if math.IsInf(f, 1) {
		return "+inf"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// laravelDue is Laravel's delayed score: whole seconds, floor(now)+ceil(delay).
func laravelDue(now time.Time, d time.Duration) string {
	return strconv.FormatInt(now.Unix()+int64(math.Ceil(d.Seconds())), 10)
}

// writeOp turns m into one write of the settle script: its op, score, value, headers
// JSON (Laravel layout only) and keys.
func (t *Transport) writeOp(m *transport.Message, now time.Time) (op, score string, value []byte, hdr string, keys []string) {
	ready := t.ready(m.Queue)
	if t.laravel {
		hdr = headersJSON(m.Headers)
		if m.Delay > 0 {
			keys = []string{delayedKey(ready)}
			op, score = "z", laravelDue(now, m.Delay)
		} else {
			keys = []string{ready, notifyKey(ready)}
			op, score = "n", "0"
		}
		if hdr != "" {
			keys = append(keys, headersKey(ready))
		}
		return op, score, m.Body, hdr, keys
	}
	el, dropped := element(m.Body, m.Headers)
	if dropped {
		t.log.Warn("redis: body is not UTF-8, so it cannot be framed; headers dropped", "queue", m.Queue)
	}
	if m.Delay > 0 {
		member := make([]byte, 0, 33+len(el))
		member = append(member, t.token()...)
		member = append(member, ':')
		member = append(member, el...)
		return "z", fmtScore(unixSeconds(now.Add(m.Delay))), member, "", []string{delayedKey(ready)}
	}
	return "r", "0", el, "", []string{ready}
}

// Publish writes one message: RPUSH (or, with a delay, ZADD to the delayed set; in the
// Laravel layout, the push script). It returns once Redis confirmed the write.
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	w := t.prepare(m, time.Now())
	if w.err != nil {
		return w.err
	}
	return t.rideOut(ctx, func(ctx context.Context) error {
		if w.op != "r" {
			return t.store(ctx, []write{w})[0]
		}
		// Plain publishes that several goroutines make at once go in one round trip.
		cl := &call[write]{arg: w}
		t.pushes.do(ctx, cl)
		return cl.err
	})
}

// pushGroup writes a group of plain publishes: one RPUSH per run of publishes to the
// same list, in the order they were made, pipelined when there is more than one run.
func (t *Transport) pushGroup(ctx context.Context, calls []*call[write]) {
	if w := calls[0].arg; len(calls) == 1 && t.waitN == 0 { // a lone publish, as is
		if err := t.client.RPush(ctx, w.keys[0], w.value).Err(); err != nil {
			calls[0].err = fmt.Errorf("redis: publish to %q: %w", w.queue, err)
		}
		return
	}
	ws := make([]write, len(calls))
	for i, cl := range calls {
		ws[i] = cl.arg
	}
	for i, err := range t.store(ctx, ws) {
		calls[i].err = err
	}
}

func sha1hex(b []byte) string {
	sum := sha1.Sum(b)
	return hex.EncodeToString(sum[:])
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Close closes every consumer (rewinding what they hold) and, when the transport opened
// the client from a URL, closes the client.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	err := t.consumers.Close(ctx)
	if t.owned {
		err = errors.Join(err, t.client.Close())
	}
	return err
}
