// Package redis is the BabelQueue transport for Redis, behind redis:// and rediss://
// (TLS) URLs, built on github.com/redis/go-redis/v9.
//
// Import it for its side effect, or build a transport around a client of your own:
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/redis"
//	t, err := transport.Open(ctx, "redis://127.0.0.1:6379/0?retry_after=60")
//
//	// or, with a client you configured (TLS, ACL user, Sentinel, …):
//	t := redis.New(goredis.NewClient(opts))
//
// # URL
//
//	redis://[user:password@]host:port/db[?retry_after=60&laravel=1&prefix=queues:&deferred_acks=2ms]
//
// retry_after is the visibility timeout of a reservation (a number of seconds, or a Go
// duration such as 1500ms; "null" turns recovery off). laravel=1 selects the
// Laravel-compatible layout and prefix its key prefix (default "queues:"). deferred_acks
// turns on deferred acks with the given linger (a Go duration, or a number of
// milliseconds; see [WithDeferredAcks]; default off). Durations follow the grammar of
// [transport.Query]. The go-redis connection parameters
// (dial_timeout, read_timeout, pool_size, …) are accepted too. Any other parameter is an
// error naming it.
//
// rediss:// speaks TLS with the parameters every scheme shares (docs/security.md):
// tls_ca (the CA file), tls_cert and tls_key (a client certificate: mutual TLS),
// tls_server_name, tls_insecure=1 (no verification; a warning at Open; go-redis's
// skip_verify is the same). An ACL user goes in the URL's user info:
//
//	rediss://app:secret@redis.internal:6380/0?tls_ca=/etc/bq/ca.pem&tls_cert=/etc/bq/client.pem&tls_key=/etc/bq/client.key
//
// With a client of your own, [transport.TLSOptions] builds the same *tls.Config for
// goredis.Options.TLSConfig. An Open that fails (a refused certificate, a wrong
// password) returns one [*transport.OpenError] naming the address (password redacted)
// and the cause; it matches [transport.ErrTLS] or [transport.ErrAuth].
//
// # Default layout
//
// The list key is the queue name, exactly. Publish is RPUSH <q> with the envelope bytes
// as the element. A worker reserves by moving the head of <q> to the end of
// <q>:processing and, in the same Lua script, records the reservation in the sorted set
// <q>:processing:deadlines as the member "<token>:<element>" (token: 32 lowercase hex
// digits, one per reservation) scored with the Unix time at which it lapses (now +
// retry_after). Acknowledging removes that member and LREMs the element from
// <q>:processing. At least every 100 ms while a consumer reserves, and whenever its wait
// on an empty list ends, lapsed members are swept: their element goes back to the end of
// <q>, unchanged. These are the keys and the member format the Python
// SDK 1.24.0 uses, so a Go worker and a Python worker on one queue recover each other's
// reservations, and a late settle of a reservation that was swept touches nothing (the
// gate: every settle checks its own member first). A reservation made by an SDK that
// writes no deadline member is never swept by a Go worker.
//
// Messages published with a delay wait in the Go-owned sorted set <q>:delayed until due;
// Go consumers move them to <q> (SDKs without that set do not read it).
//
// When a message has headers, the element is the frame
// {"__bq_frame":1,"headers":{…},"body":"<envelope as a JSON string>"} and the consumer
// unwraps it; without headers the element is the envelope bytes exactly.
//
// # Laravel layout
//
// With laravel=1 the keys are Laravel's: the ready list <prefix><q>, the sorted sets
// <prefix><q>:reserved and <prefix><q>:delayed, and the wake-up list <prefix><q>:notify,
// with Laravel's reserve (the reserved member is the job with attempts one higher),
// release (to :delayed) and migrate semantics, so a Go worker and a Laravel (or Python
// laravel-mode) worker share a queue and can settle each other's reservations. Headers
// cannot ride in this layout and are dropped.
//
// # Settlement
//
// Every settle (ack, rewind, and the retry and dead-letter writes that come with an ack)
// is one Lua script: the writes and the removal of the reservation happen together or
// not at all. A rewind puts the element back at the head of the queue.
//
// # Grouping
//
// Up to four calls of one kind go to Redis side by side, each alone, as four go-redis
// workers would; calls that goroutines make while four are in flight go together when
// one returns: plain publishes as one RPUSH per list, acks and rewinds of one consumer
// as one settle script call, reservations for the workers waiting on one consumer as
// one reserve script call. Each call still waits for, and gets, its own result.
//
// # Deferred acks
//
// With [WithDeferredAcks] (deferred_acks=2ms in a URL) an Ack without writes returns at
// once and its removal rides in the consumer's next reserve script call: one round trip
// per message fewer. What it costs is said at [WithDeferredAcks]; the default is off.
package redis

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
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
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
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
var ours = []string{"deferred_acks", "laravel", "prefix", "retry_after"}

// goRedisParams lists the go-redis connection parameters accepted in a URL.
var goRedisParams = []string{
	"client_name", "conn_max_idle_time", "conn_max_lifetime", "conn_max_lifetime_jitter", "db",
	"dial_timeout", "idle_timeout", "max_active_conns", "max_concurrent_dials", "max_conn_age",
	"max_idle_conns", "max_retries", "max_retry_backoff", "min_idle_conns", "min_retry_backoff",
	"pipeline_pool_size", "pipeline_read_buffer_size", "pipeline_write_buffer_size", "pool_fifo",
	"pool_size", "pool_timeout", "protocol", "read_timeout", "skip_verify", "write_timeout",
}

func open(ctx context.Context, u *url.URL) (transport.Transport, error) {
	opts, rest, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	var certWatch *transport.ClientCertWatch
	rest.TLSConfig, certWatch = transport.WatchClientCert(rest.TLSConfig)
	client := goredis.NewClient(rest)
	routeClientLog(transport.LoggerFrom(ctx))
	t := New(client, append([]Option{WithLogger(transport.LoggerFrom(ctx))}, opts...)...)
	t.owned = true
	transport.WarnInsecureTLS(t.log, "redis", transport.RedactURL(u), rest.TLSConfig)
	if err := checkTLS(ctx, rest); err != nil {
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
func parseURL(u *url.URL) ([]Option, *goredis.Options, error) {
	scheme := strings.ToLower(u.Scheme)
	bad := func(param, reason string) error {
		return &transport.BadURLError{Scheme: scheme, Param: param, Reason: reason}
	}
	if err := transport.CheckParams(u, append(append(append([]string{}, ours...), goRedisParams...), transport.TLSParams...)...); err != nil {
		return nil, nil, err
	}
	// TLS: the shared grammar (transport.ParseTLS); go-redis's skip_verify is tls_insecure.
	tlsConfig, err := transport.ParseTLS(u, scheme == "rediss", map[string]string{"skip_verify": transport.ParamTLSInsecure})
	if err != nil {
		return nil, nil, err
	}
	pq, err := transport.ParseQuery(u)
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
			return nil, nil, bad("prefix", "only applies with laravel=1")
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
	if d, ok, err := pq.Duration("deferred_acks", time.Millisecond, 0, time.Minute); err != nil {
		return nil, nil, err
	} else if ok {
		opts = append(opts, WithDeferredAcks(d))
	}
	q := u.Query()
	for _, k := range append(append([]string{"skip_verify"}, ours...), transport.TLSParams...) {
		q.Del(k)
	}
	c := *u
	c.Scheme = scheme
	c.RawQuery = q.Encode()
	ro, err := goredis.ParseURL(c.String())
	if err != nil {
		param := "url"
		msg := err.Error()
		switch {
		case strings.Contains(msg, "database"), strings.Contains(msg, "path"):
			param = "db"
		default:
			for _, p := range goRedisParams {
				if strings.Contains(msg, " "+p+" ") {
					param = p
				}
			}
		}
		// go-redis messages name the part at fault; none of them echo the password.
		return nil, nil, bad(param, strings.TrimPrefix(msg, "redis: "))
	}
	if tlsConfig != nil {
		if tlsConfig.ServerName == "" {
			tlsConfig.ServerName = u.Hostname()
		}
		ro.TLSConfig = tlsConfig
	}
	return opts, ro, nil
}

// Option configures a [Transport].
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
// back to the queue. Zero turns recovery off (the reservation never lapses). Default
// [DefaultRetryAfter].
func WithRetryAfter(d time.Duration) Option {
	return func(t *Transport) { t.retryAfter = d }
}

// WithPollInterval bounds how long a waiting consumer blocks on Redis before it looks
// at the delayed set and lapsed reservations again. Default one second.
func WithPollInterval(d time.Duration) Option {
	return func(t *Transport) {
		if d > 0 {
			t.poll = d
		}
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
// (never more than the room its prefetch leaves). Default 16.
func WithBatch(n int) Option {
	return func(t *Transport) {
		if n > 0 {
			t.batch = n
		}
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
// after linger. Retries, dead-letters and rewinds stay synchronous. Zero (the default)
// turns it off.
func WithDeferredAcks(linger time.Duration) Option {
	return func(t *Transport) {
		if linger > 0 {
			t.ackLinger = linger
		}
	}
}

// MaxMessageSize is the longest element Redis stores by default: a string of 512 MiB
// (proto-max-bulk-len). It counts the stored element: the envelope, or the header frame
// around it.
const MaxMessageSize = 512 << 20

// WithMaxMessageSize sets the longest element a publish or settle write may store, for
// a Redis whose proto-max-bulk-len is lower than the default [MaxMessageSize]. A longer
// message fails with a [*transport.TooLargeError] before it is sent.
func WithMaxMessageSize(n int) Option {
	return func(t *Transport) {
		if n > 0 {
			t.maxSize = n
		}
	}
}

// checkSize refuses an element longer than the limit.
func (t *Transport) checkSize(queue string, el []byte) error {
	return transport.CheckSize("redis", queue, len(el), t.maxSize)
}

// Transport is a connection to one Redis. It is safe for concurrent use.
type Transport struct {
	client     goredis.UniversalClient
	owned      bool
	laravel    bool
	prefix     string
	retryAfter time.Duration
	poll       time.Duration
	batch      int
	ackLinger  time.Duration
	maxSize    int
	log        *slog.Logger

	mu        sync.Mutex
	closed    bool
	consumers map[*consumer]struct{}

	tokenMu  sync.Mutex
	tokenPfx string
	tokenN   uint64

	pushes committer[push]
}

// push is one plain publish: RPUSH key value.
type push struct {
	key   string
	value []byte
}

// New builds a transport around a client the caller constructed and keeps owning:
// Close does not close it.
func New(client goredis.UniversalClient, opts ...Option) *Transport {
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	t := &Transport{
		client:     client,
		retryAfter: DefaultRetryAfter,
		poll:       time.Second,
		batch:      16,
		maxSize:    MaxMessageSize,
		log:        slog.Default(),
		consumers:  map[*consumer]struct{}{},
		tokenPfx:   hex.EncodeToString(seed[:]),
	}
	for _, o := range opts {
		o(t)
	}
	t.pushes.run = t.pushGroup
	t.pushes.lanes = groupLanes
	return t
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
	t.tokenMu.Lock()
	t.tokenN++
	n := t.tokenN
	t.tokenMu.Unlock()
	var b [8]byte
	for i := 7; i >= 0; i-- {
		b[i] = byte(n)
		n >>= 8
	}
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

// Publish writes one message: RPUSH (or, with a delay, ZADD to the delayed set). It
// returns once Redis confirmed the write.
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	if m == nil || m.Queue == "" {
		return errors.New("redis: message has no queue")
	}
	op, score, value, hdr, keys := t.writeOp(m, time.Now())
	if err := t.checkSize(m.Queue, value); err != nil {
		return err
	}
	var err error
	switch {
	case op == "z" && hdr != "":
		_, err = t.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.ZAdd(ctx, keys[0], goredis.Z{Score: mustScore(score), Member: value})
			p.HSet(ctx, keys[1], sha1hex(value), hdr)
			return nil
		})
	case op == "z":
		err = t.client.ZAdd(ctx, keys[0], goredis.Z{Score: mustScore(score), Member: value}).Err()
	case op == "n":
		if hdr == "" {
			keys = append(keys, headersKey(t.ready(m.Queue)))
		}
		err = pushNotify.Run(ctx, t.client, keys, value, hdr).Err()
	default:
		// Plain publishes that several goroutines make at once go in one round trip.
		cl := &call[push]{arg: push{key: keys[0], value: value}}
		t.pushes.do(ctx, cl)
		err = cl.err
	}
	if err != nil {
		return fmt.Errorf("redis: publish to %q: %w", m.Queue, err)
	}
	return nil
}

// pushGroup writes a group of plain publishes: one RPUSH per run of publishes to the
// same list, in the order they were made, pipelined when there is more than one run.
func (t *Transport) pushGroup(ctx context.Context, calls []*call[push]) {
	if len(calls) == 1 {
		calls[0].err = t.client.RPush(ctx, calls[0].arg.key, calls[0].arg.value).Err()
		return
	}
	type run struct {
		from, to int // calls[from:to] share a key
		cmd      *goredis.IntCmd
	}
	var runs []run
	for i := 0; i < len(calls); {
		j := i + 1
		for j < len(calls) && calls[j].arg.key == calls[i].arg.key {
			j++
		}
		runs = append(runs, run{from: i, to: j})
		i = j
	}
	rpush := func(c goredis.Cmdable, r run) *goredis.IntCmd {
		vals := make([]any, 0, r.to-r.from)
		for _, cl := range calls[r.from:r.to] {
			vals = append(vals, cl.arg.value)
		}
		return c.RPush(ctx, calls[r.from].arg.key, vals...)
	}
	if len(runs) == 1 {
		runs[0].cmd = rpush(t.client, runs[0])
	} else {
		_, _ = t.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i := range runs {
				runs[i].cmd = rpush(p, runs[i])
			}
			return nil
		})
	}
	for _, r := range runs {
		err := r.cmd.Err()
		for _, cl := range calls[r.from:r.to] {
			cl.err = err
		}
	}
}

func sha1hex(b []byte) string {
	sum := sha1.Sum(b)
	return hex.EncodeToString(sum[:])
}

func mustScore(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Consume opens a consumer on queue.
func (t *Transport) Consume(_ context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if queue == "" {
		return nil, errors.New("redis: consume needs a queue name")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, transport.ErrClosed
	}
	c := newConsumer(t, queue, max(opts.Prefetch, 1))
	t.consumers[c] = struct{}{}
	return c, nil
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
	cs := make([]*consumer, 0, len(t.consumers))
	for c := range t.consumers {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	var errs []error
	for _, c := range cs {
		if err := c.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if t.owned {
		if err := t.client.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (t *Transport) forget(c *consumer) {
	t.mu.Lock()
	delete(t.consumers, c)
	t.mu.Unlock()
}
