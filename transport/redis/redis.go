package redis

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
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

// Acks, rewinds and plain publishes that workers make at once go to Redis in groups of
// at most maxGroup calls, with up to groupLanes groups of one kind in flight
// ([driverkit.GroupCommit]), so a few workers do not wait on each other's round trips.
const maxGroup, groupLanes = 64, 4

// ErrReservationLost is returned by Settle when the delivery's reservation lapsed and was
// handed back to the queue (by this or another worker's sweep) before it was settled:
// nothing was written and the message will be (or was) delivered again.
var ErrReservationLost = errors.New("redis: reservation lapsed before it was settled")

// urlParams are the URL parameters that are one option each.
var urlParams = driverkit.Params[Option]{
	{Name: "publish_wait", Duration: WithPublishWait, Hi: time.Hour},
	{Name: "deferred_acks", Duration: WithDeferredAcks, Unit: time.Millisecond, Hi: time.Minute},
}

// ours lists the query parameters this package reads itself.
var ours = append([]string{"cluster", "laravel", "prefix", "retry_after", "sentinel", "wait", "wait_timeout"}, urlParams.Names()...)

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
	tlsConfig := cfg.tls
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
	client.AddHook(silentConnLog{log: t.common.Logger})
	transport.WarnInsecureTLS(t.common.Logger, "redis", transport.RedactURL(u), *tlsConfig)
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
	lu := *u
	lu.Scheme = strings.ToLower(u.Scheme)
	pq, err := driverkit.ParseQuery("redis", &lu, slices.Concat(ours, goRedisParams, transport.TLSParams)...)
	if err != nil {
		return nil, nil, err
	}
	// TLS: the shared grammar (driverkit.Query.TLS); go-redis's skip_verify is tls_insecure.
	tlsConfig, err := pq.TLS(lu.Scheme == "rediss", map[string]string{"skip_verify": transport.ParamTLSInsecure})
	if err != nil {
		return nil, nil, err
	}
	opts, err := urlParams.Read(pq)
	if err != nil {
		return nil, nil, err
	}
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
	if o, err := parseWait(pq); err != nil {
		return nil, nil, err
	} else if o != nil {
		opts = append(opts, o)
	}
	q := u.Query() // go-redis's own parameters are left for its URL parsers
	for _, k := range slices.Concat([]string{"skip_verify"}, ours, transport.TLSParams) {
		q.Del(k)
	}
	lu.RawQuery = q.Encode()
	cfg, err := parseNodes(pq, &lu)
	if err != nil {
		return nil, nil, err
	}
	if tlsConfig != nil {
		if tlsConfig.ServerName == "" && cfg.plain != nil {
			tlsConfig.ServerName = u.Hostname() // several nodes: each dial names its own host
		}
		*cfg.tls = tlsConfig
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
	return func(t *Transport) { t.laravel, t.prefix = true, prefix }
}

// WithRetryAfter sets the visibility timeout: a reservation not settled within d goes
// back to the queue. Zero turns recovery off (the reservation never lapses); a negative
// d is an error. Default [DefaultRetryAfter].
func WithRetryAfter(d time.Duration) Option {
	return func(t *Transport) { t.common.SetAtLeast("WithRetryAfter", &t.retryAfter, d, 0) }
}

// WithPollInterval bounds how long a waiting consumer blocks on Redis before it looks
// at the delayed set and lapsed reservations again; d must be above zero. Default one
// second.
func WithPollInterval(d time.Duration) Option {
	return func(t *Transport) { t.common.SetAtLeast("WithPollInterval", &t.poll, d, 1) }
}

// WithLogger sets the logger for conditions that are not errors of a call (a dropped
// header, a reconnect). Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(t *Transport) { t.common.SetLogger(l) }
}

// WithBatch bounds how many messages one reserve script takes at once for one consumer
// (never more than the room its prefetch leaves); n must be 1 or more. Default 64.
func WithBatch(n int) Option {
	return func(t *Transport) { t.common.SetAtLeastN("WithBatch", &t.batch, n, 1) }
}

// WithDeferredAcks makes an Ack without writes return at once, saving a round trip per
// message: the removal of the reservation goes to Redis with the consumer's next reserve
// call, or after linger, and before its Close returns ([driverkit.DeferredAcks]). The
// cost: a worker that dies in that window leaves the message to be delivered again after
// retry_after, and an ack whose reservation had lapsed is logged instead of returned as
// [ErrReservationLost] (docs/transports/redis.md). Retries, dead-letters and rewinds stay
// synchronous; [transport.SyncAcks] sends the deferred acks at once. Zero (the default)
// turns it off; a negative linger is an error.
func WithDeferredAcks(linger time.Duration) Option {
	return func(t *Transport) { t.common.SetAtLeast("WithDeferredAcks", &t.ackLinger, linger, 0) }
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
	return func(t *Transport) { t.common.SetMaxMessageSize(n) }
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
	common      driverkit.Common // the logger, the size limit, bad option values
	waitCap     time.Duration    // the longest blocking look a pipeline's read timeout allows; 0: no bound
	cluster     bool             // a Redis Cluster: a queue's keys need a hash tag
	waitN       int              // WAIT for this many replicas after each write (0: no WAIT)
	waitFor     time.Duration    // WAIT's timeout
	publishWait time.Duration    // WithPublishWait

	closed    atomic.Bool
	consumers driverkit.Group // the consumers opened, closed with the transport

	tokenPfx string
	tokenN   atomic.Uint64

	pushes driverkit.GroupCommit[write] // plain publishes
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
		batch:       64,
		common:      driverkit.NewCommon("redis", 0, MaxMessageSize, 0),
		tokenPfx:    hex.EncodeToString(seed[:]),
	}
	for _, o := range opts {
		o(t)
	}
	if err := t.common.Err(); err != nil {
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
	t.pushes = driverkit.GroupCommit[write]{Send: t.pushGroup, Lanes: groupLanes, Max: maxGroup}
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
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], t.tokenN.Add(1))
	var b [32]byte
	copy(b[:16], t.tokenPfx)
	hex.Encode(b[16:], n[:])
	return string(b[:])
}

// deadline is the deadline score of a reservation made at now (default layout).
func (t *Transport) deadline(now time.Time) string {
	if t.retryAfter > 0 {
		return scoreAt(now.Add(t.retryAfter))
	}
	return "+inf"
}

// The keys of a queue (docs/transports/redis.md): its ready list; the default layout's
// processing list and deadlines zset; the delayed zset (given the ready key); and the
// Laravel layout's, given the ready key: its reserved zset, notify list and the Go-owned
// hash of the jobs' headers (field: the SHA-1 of the job; a Laravel job has no frame).
func (t *Transport) ready(q string) string {
	if t.laravel {
		return t.prefix + q
	}
	return q
}
func processingKey(q string) string   { return q + ":processing" }
func deadlinesKey(q string) string    { return q + ":processing:deadlines" }
func delayedKey(ready string) string  { return ready + ":delayed" }
func reservedKey(ready string) string { return ready + ":reserved" }
func notifyKey(ready string) string   { return ready + ":notify" }
func headersKey(ready string) string  { return ready + ":bq-headers" }

// headersJSON encodes the non-blank headers as a JSON object, or "" when none.
func headersJSON(h map[string]string) string {
	if kept := nonBlank(h); kept != nil {
		return string(encodeJSON(kept))
	}
	return ""
}

// scoreAt is tm as a sorted-set score: Unix seconds to the millisecond, written as
// strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64) writes it ("1733371234.5"), in one
// allocation and without the float's shortest-form search (a reserve call writes two).
func scoreAt(tm time.Time) string {
	ms := tm.UnixMilli()
	if ms < 0 {
		return strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64)
	}
	var b [24]byte
	out := strconv.AppendInt(b[:0], ms/1000, 10)
	if frac := ms % 1000; frac != 0 {
		out = append(out, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
		out = bytes.TrimRight(out, "0")
	}
	return string(out)
}

// laravelDue is Laravel's delayed score: whole seconds, floor(now)+ceil(delay).
func laravelDue(now time.Time, d time.Duration) string {
	return strconv.FormatInt(now.Unix()+int64(math.Ceil(d.Seconds())), 10)
}

// writeOp is m as one write of a publish or the settle script: its op, score, value,
// headers JSON (Laravel layout only) and keys.
func (t *Transport) writeOp(m *transport.Message, now time.Time) write {
	ready := t.ready(m.Queue)
	w := write{queue: m.Queue, op: "r", score: "0", value: m.Body, keys: []string{ready}}
	if t.laravel {
		w.hdr = headersJSON(m.Headers)
		if m.Delay > 0 {
			w.op, w.score, w.keys[0] = "z", laravelDue(now, m.Delay), delayedKey(ready)
		} else {
			w.op, w.keys = "n", append(w.keys, notifyKey(ready))
		}
		if w.hdr != "" {
			w.keys = append(w.keys, headersKey(ready))
		}
		return w
	}
	el, dropped := element(m.Body, m.Headers)
	if dropped {
		t.common.Logger.Warn("redis: body is not UTF-8, so it cannot be framed; headers dropped", "queue", m.Queue)
	}
	if w.value = el; m.Delay > 0 {
		member := make([]byte, 0, 33+len(el))
		w.value = append(append(append(member, t.token()...), ':'), el...)
		w.op, w.score, w.keys[0] = "z", scoreAt(now.Add(m.Delay)), delayedKey(ready)
	}
	return w
}

// Publish writes one message: RPUSH (or, with a delay, ZADD to the delayed set; in the
// Laravel layout, the push script). It returns once Redis confirmed the write.
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	if t.closed.Load() {
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
		cl := &driverkit.GroupCall[write]{Arg: w}
		t.pushes.Do(ctx, cl)
		return cl.Err
	})
}

// pushGroup writes a group of plain publishes: one RPUSH per run of publishes to the
// same list, in the order they were made, pipelined when there is more than one run.
func (t *Transport) pushGroup(ctx context.Context, calls []*driverkit.GroupCall[write]) {
	if w := calls[0].Arg; len(calls) == 1 && t.waitN == 0 { // a lone publish, as is
		if err := t.client.RPush(ctx, w.keys[0], w.value).Err(); err != nil {
			calls[0].Err = fmt.Errorf("redis: publish to %q: %w", w.queue, err)
		}
		return
	}
	ws := make([]write, len(calls))
	for i, cl := range calls {
		ws[i] = cl.Arg
	}
	for i, err := range t.store(ctx, ws) {
		calls[i].Err = err
	}
}

// Close closes every consumer (rewinding what they hold) and, when the transport opened
// the client from a URL, closes the client.
func (t *Transport) Close(ctx context.Context) error {
	if t.closed.Swap(true) {
		return nil
	}
	err := t.consumers.Close(ctx)
	if t.owned {
		err = errors.Join(err, t.client.Close())
	}
	return err
}
