// Package transporttest is the behavioural test kit every transport runs against its
// real broker: the same cases, the same assertions, for memory:// and for every broker.
//
// A broker package calls [Run] from a test with a [Config] that opens a transport on the
// broker under test:
//
//	func TestTransport(t *testing.T) {
//		transporttest.Run(t, transporttest.Config{
//			Open: func(t *testing.T) transport.Transport { return openOnTestBroker(t) },
//		})
//	}
//
// Integration tests find their broker with [BrokerURL], which fails the test under
// CI=true when the broker's URL is not set or the broker does not answer, and skips it
// elsewhere with the command that starts it.
package transporttest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Config describes the transport under test.
type Config struct {
	// Open returns a transport connected to the broker under test. The kit closes it.
	Open func(t *testing.T) transport.Transport
	// NewQueue returns a queue name no other test uses. Default: "bqtest-" and random hex.
	NewQueue func(t *testing.T) string
	// NoKeys says the broker carries no record key (Redis, RabbitMQ, Artemis).
	NoKeys bool
	// TextBodiesOnly says the broker cannot carry bytes that are not UTF-8 (SQS).
	TextBodiesOnly bool
	// EmptyKeyIsNoKey says the broker delivers an empty record key as no key (Pulsar).
	EmptyKeyIsNoKey bool
	// UnorderedBatches says the messages of one confirmed batch may arrive in any order
	// (an SQS standard queue stores the entries of a SendMessageBatch call in no order).
	UnorderedBatches bool
	// NativeRedeliveries says Delivery.Redeliveries rises when a delivery is rewound.
	NativeRedeliveries bool
	// ReceiveTimeout bounds the wait for a message that must arrive. Default 30s.
	ReceiveTimeout time.Duration
	// QuietPeriod is how long the kit waits before it concludes that no message is
	// coming. Default 1s.
	QuietPeriod time.Duration
	// Prefetch is the prefetch the kit consumes with. Default 8.
	Prefetch int
	// Explain, when set, says what the broker knows of queue when a case found it short
	// of the messages it waited for (a Kafka group's members and their partitions, the
	// topic's end offsets), so that a write that never landed can be told from a
	// consumer that never got its share. The kit logs the text; it changes no verdict.
	Explain func(t *testing.T, tr transport.Transport, queue string) string

	// The consumer-contract cases below run only for a driver that opts in, so each
	// driver adopts them when it passes them.

	// BreakSettleWrites makes the broker refuse the settle writes of tr (a fault hook of
	// the driver, a TCP proxy that goes down, …) until restore is called; publishes may
	// fail meanwhile and connections may be cut. Set, it runs
	// SettleWriteFailureAcksNothing: a failed settle write acknowledges nothing, makes
	// no write, and the delivery comes back. See also [Config.OpenThroughProxy].
	BreakSettleWrites func(t *testing.T, tr transport.Transport) (restore func())
	// PrefetchBound runs PrefetchBound: Receive never hands out more than the prefetch
	// of unsettled deliveries, and acks and rewinds free their slots.
	PrefetchBound bool
	// SettleAfterClose runs SettleAfterClose: settling a delivery its consumer gave back
	// on Close fails at once with ErrClosed or ErrAlreadySettled.
	SettleAfterClose bool
	// RefusesBadSettlements runs RefusesBadSettlements: an outcome not offered matches
	// ErrUnsupported, writes with Rewind or a nil or queue-less write ErrBadSettlement,
	// and neither settles the delivery.
	RefusesBadSettlements bool
}

func (c *Config) defaults() {
	if c.NewQueue == nil {
		c.NewQueue = func(*testing.T) string { return UniqueName("bqtest") }
	}
	if c.ReceiveTimeout == 0 {
		c.ReceiveTimeout = 30 * time.Second
	}
	if c.QuietPeriod == 0 {
		c.QuietPeriod = time.Second
	}
	if c.Prefetch == 0 {
		c.Prefetch = 8
	}
}

// UniqueName returns prefix, a dash and 12 random hex digits.
func UniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// Run runs every case of the kit against the transport cfg opens.
func Run(t *testing.T, cfg Config) {
	cfg.defaults()
	cases := []kitCase{
		{"PublishReceiveAck", testPublishReceiveAck},
		{"BodyBytesExact", testBodyBytesExact},
		{"HeadersAndKeyRoundTrip", testHeadersAndKey},
		{"RewindRedelivers", testRewind},
		{"ConfirmedSettleWrites", testConfirmedWrites},
		{"SettleTwice", testSettleTwice},
		{"ConcurrentConsumers", testConcurrentConsumers},
		{"CloseWithInFlight", testCloseWithInFlight},
		{"DelayedMessage", testDelay},
		{"ReceiveHonoursContext", testReceiveContext},
	}
	more, left := hardeningCases(cfg)
	cases = append(cases, more...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, cfg) })
	}
	noteLeftOut(t, left)
}

func open(t *testing.T, cfg Config) transport.Transport {
	t.Helper()
	tr := cfg.Open(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

func consume(t *testing.T, cfg Config, tr transport.Transport, queue string) transport.Consumer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ReceiveTimeout)
	defer cancel()
	c, err := tr.Consume(ctx, queue, transport.ConsumeOptions{Prefetch: cfg.Prefetch})
	if err != nil {
		t.Fatalf("Consume(%q): %v", queue, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func publish(t *testing.T, tr transport.Transport, m *transport.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Publish(ctx, m); err != nil {
		t.Fatalf("Publish to %q: %v", m.Queue, err)
	}
}

// Receive waits up to timeout for one delivery and fails the test when none comes.
func Receive(t *testing.T, c transport.Consumer, timeout time.Duration) *transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: expected a delivery within %s: %v", timeout, err)
	}
	return d
}

// ExpectNothing fails the test when c hands out a delivery within quiet.
func ExpectNothing(t *testing.T, c transport.Consumer, quiet time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), quiet)
	defer cancel()
	d, err := c.Receive(ctx)
	if err == nil {
		t.Fatalf("expected no delivery, got body %q", d.Body)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on an empty queue: want context.DeadlineExceeded, got %v", err)
	}
}

func settle(t *testing.T, c transport.Consumer, d *transport.Delivery, s transport.Settlement) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Settle(ctx, d, s); err != nil {
		t.Fatalf("Settle(%s): %v", s.Outcome, err)
	}
}

func body(s string) []byte {
	return []byte(`{"job":"urn:babel:test:` + s + `","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"n":"` + s + `"},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"q","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`)
}

func msg(queue, s string) *transport.Message {
	return &transport.Message{
		Queue: queue,
		Body:  body(s),
		Projection: transport.Projection{
			URN: "urn:babel:test:" + s, TraceID: "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
			MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567", Lang: "go", SchemaVersion: 1, CreatedAt: 1749132727000,
		},
	}
}

func testPublishReceiveAck(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	m := msg(q, "one")
	publish(t, tr, m)
	c := consume(t, cfg, tr, q)
	d := Receive(t, c, cfg.ReceiveTimeout)
	if !bytes.Equal(d.Body, m.Body) {
		t.Fatalf("body changed in transit:\n got %q\nwant %q", d.Body, m.Body)
	}
	if d.Queue != q {
		t.Errorf("Delivery.Queue = %q, want %q", d.Queue, q)
	}
	settle(t, c, d, transport.Settlement{Outcome: transport.Ack})
	ExpectNothing(t, c, cfg.QuietPeriod)
}

func testBodyBytesExact(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	bodies := [][]byte{
		[]byte(`{"job":"urn:babel:x:y","n":1e400,"big":12345678901234567890123,"s":"Caf\u00e9 — naïve ☕ \ud83d\ude00","esc":"<&>"}`),
		[]byte(`not json at all {`),
		[]byte(`[1,2,3]`),
		[]byte("{\"job\":  \"urn:babel:ws\" ,\n\t\"data\" : { } }"),
		[]byte(`{"__bq_frame":1,"headers":{"a":"b"},"body":"looks like a frame"}`),
	}
	if !cfg.TextBodiesOnly {
		bodies = append(bodies, []byte{'{', '"', 'j', '"', ':', '"', 0xff, 0xfe, '"', '}'}, []byte{0xef, 0xbb, 0xbf, '{', '}'}, []byte{0x00, 0x01, 0x80})
	}
	for _, b := range bodies {
		publish(t, tr, &transport.Message{Queue: q, Body: b})
	}
	c := consume(t, cfg, tr, q)
	var got [][]byte
	for range bodies {
		d := Receive(t, c, cfg.ReceiveTimeout)
		got = append(got, d.Body)
		settle(t, c, d, transport.Settlement{Outcome: transport.Ack})
	}
	sortBytes(got)
	want := append([][]byte(nil), bodies...)
	sortBytes(want)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("body not kept byte for byte:\n got %q\nwant %q", got[i], want[i])
		}
	}
}

func sortBytes(b [][]byte) {
	sort.Slice(b, func(i, j int) bool { return bytes.Compare(b[i], b[j]) < 0 })
}

func testHeadersAndKey(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	m := msg(q, "headers")
	m.Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-tenant": "acme é"}
	if !cfg.NoKeys {
		m.Key = []byte("order-1042")
	}
	publish(t, tr, m)
	c := consume(t, cfg, tr, q)
	d := Receive(t, c, cfg.ReceiveTimeout)
	for k, v := range m.Headers {
		if d.Headers[k] != v {
			t.Errorf("header %q = %q, want %q (all: %v)", k, d.Headers[k], v, d.Headers)
		}
	}
	if !bytes.Equal(d.Body, m.Body) {
		t.Errorf("body changed when headers were given:\n got %q\nwant %q", d.Body, m.Body)
	}
	if !cfg.NoKeys && !bytes.Equal(d.Key, m.Key) {
		t.Errorf("key = %q, want %q", d.Key, m.Key)
	}
	// A settle write keeps the key exactly, and a missing key stays missing.
	next := cfg.NewQueue(t)
	w := msg(next, "headers")
	w.Key = d.Key
	w.Headers = d.Headers
	settle(t, c, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{w}})
	nm := msg(q, "nokey")
	publish(t, tr, nm)
	d2 := Receive(t, c, cfg.ReceiveTimeout)
	if len(d2.Key) != 0 {
		t.Errorf("a message published without a key came back with key %q", d2.Key)
	}
	settle(t, c, d2, transport.Settlement{Outcome: transport.Ack})
	c2 := consume(t, cfg, tr, next)
	d3 := Receive(t, c2, cfg.ReceiveTimeout)
	if !cfg.NoKeys && !bytes.Equal(d3.Key, m.Key) {
		t.Errorf("settle write lost the key: %q, want %q", d3.Key, m.Key)
	}
	if d3.Headers["x-tenant"] != "acme é" {
		t.Errorf("settle write lost a header: %v", d3.Headers)
	}
	settle(t, c2, d3, transport.Settlement{Outcome: transport.Ack})
}

func testRewind(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	m := msg(q, "rewind")
	publish(t, tr, m)
	c := consume(t, cfg, tr, q)
	d := Receive(t, c, cfg.ReceiveTimeout)
	first := d.Redeliveries
	settle(t, c, d, transport.Settlement{Outcome: transport.Rewind})
	d = Receive(t, c, cfg.ReceiveTimeout)
	if !bytes.Equal(d.Body, m.Body) {
		t.Fatalf("rewound delivery came back changed: %q", d.Body)
	}
	if cfg.NativeRedeliveries && d.Redeliveries <= first {
		t.Errorf("Redeliveries after a rewind = %d, want > %d", d.Redeliveries, first)
	}
	second := d.Redeliveries
	settle(t, c, d, transport.Settlement{Outcome: transport.Rewind})
	d = Receive(t, c, cfg.ReceiveTimeout)
	if cfg.NativeRedeliveries && d.Redeliveries <= second {
		t.Errorf("Redeliveries after a second rewind = %d, want > %d", d.Redeliveries, second)
	}
	settle(t, c, d, transport.Settlement{Outcome: transport.Ack})
	ExpectNothing(t, c, cfg.QuietPeriod)
}

func testConfirmedWrites(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	q, retry, dlq := cfg.NewQueue(t), cfg.NewQueue(t), cfg.NewQueue(t)
	publish(t, tr, msg(q, "confirmed"))
	c := consume(t, cfg, tr, q)
	d := Receive(t, c, cfg.ReceiveTimeout)
	w1 := msg(retry, "confirmed")
	w1.Attempts = 1
	w1.Body = bytes.Replace(w1.Body, []byte(`"attempts":0`), []byte(`"attempts":1`), 1)
	w2 := &transport.Message{Queue: dlq, Body: []byte(`{"raw":"poison body"}`)}
	settle(t, c, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{w1, w2}})
	ExpectNothing(t, c, cfg.QuietPeriod)
	cr := consume(t, cfg, tr, retry)
	got := Receive(t, cr, cfg.ReceiveTimeout)
	if !bytes.Equal(got.Body, w1.Body) {
		t.Errorf("retry write body = %q, want %q", got.Body, w1.Body)
	}
	settle(t, cr, got, transport.Settlement{Outcome: transport.Ack})
	cd := consume(t, cfg, tr, dlq)
	got = Receive(t, cd, cfg.ReceiveTimeout)
	if !bytes.Equal(got.Body, w2.Body) {
		t.Errorf("dead-letter write body = %q, want %q", got.Body, w2.Body)
	}
	settle(t, cd, got, transport.Settlement{Outcome: transport.Ack})
}

func testSettleTwice(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	publish(t, tr, msg(q, "twice"))
	c := consume(t, cfg, tr, q)
	d := Receive(t, c, cfg.ReceiveTimeout)
	settle(t, c, d, transport.Settlement{Outcome: transport.Ack})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); !errors.Is(err, transport.ErrAlreadySettled) {
		t.Errorf("second Settle = %v, want ErrAlreadySettled", err)
	}
}

func testConcurrentConsumers(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	const n = 60
	for i := range n {
		publish(t, tr, msg(q, fmt.Sprintf("c%03d", i)))
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 4*cfg.ReceiveTimeout)
	defer cancel()
	done := make(chan struct{})
	var doneOnce sync.Once
	for w := range 2 {
		c := consume(t, cfg, tr, q)
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					d, err := c.Receive(ctx)
					if err != nil {
						return
					}
					if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
						t.Errorf("worker %d/%d: Settle: %v", w, g, err)
						return
					}
					mu.Lock()
					seen[string(d.Body)]++
					total := len(seen)
					mu.Unlock()
					if total == n {
						doneOnce.Do(func() { close(done) })
					}
				}
			}()
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("two consumers with three workers each received %d distinct messages, want %d", len(seen), n)
	}
	for b, k := range seen {
		if k != 1 {
			t.Errorf("message %s delivered %d times with no failure", b, k)
		}
	}
}

func testCloseWithInFlight(t *testing.T, cfg Config) { closeWithHeld(t, cfg, "inflight", nil) }

// closeWithHeld closes a consumer that holds one delivery, calls afterClose with the
// closed consumer and that delivery (when not nil), and checks that the message comes
// back to a new consumer.
func closeWithHeld(t *testing.T, cfg Config, name string, afterClose func(ctx context.Context, c transport.Consumer, d *transport.Delivery)) {
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	m := msg(q, name)
	publish(t, tr, m)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ReceiveTimeout)
	defer cancel()
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: cfg.Prefetch})
	if err != nil {
		t.Fatal(err)
	}
	d := Receive(t, c, cfg.ReceiveTimeout)
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close with a delivery in flight: %v", err)
	}
	if afterClose != nil {
		afterClose(ctx, c, d)
	}
	c2 := consume(t, cfg, tr, q)
	d2 := Receive(t, c2, 2*cfg.ReceiveTimeout)
	if !bytes.Equal(d2.Body, m.Body) {
		t.Fatalf("after Close the unsettled message came back as %q", d2.Body)
	}
	settle(t, c2, d2, transport.Settlement{Outcome: transport.Ack})
}

func testDelay(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	c := consume(t, cfg, tr, q)
	m := msg(q, "delayed")
	m.Delay = 3 * time.Second
	publish(t, tr, m)
	if !tr.Capabilities().Delay {
		// A binding without delays sends the message at once: never refused, never lost.
		d := Receive(t, c, cfg.ReceiveTimeout)
		if !bytes.Equal(d.Body, m.Body) {
			t.Fatalf("body = %q, want %q", d.Body, m.Body)
		}
		settle(t, c, d, transport.Settlement{Outcome: transport.Ack})
		return
	}
	// Well before it is due, nothing arrives.
	ExpectNothing(t, c, 500*time.Millisecond)
	d := Receive(t, c, cfg.ReceiveTimeout+m.Delay)
	if !bytes.Equal(d.Body, m.Body) {
		t.Fatalf("delayed body = %q", d.Body)
	}
	settle(t, c, d, transport.Settlement{Outcome: transport.Ack})
}

func testReceiveContext(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	c := consume(t, cfg, tr, cfg.NewQueue(t))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Receive(ctx)
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Receive on an empty queue returned a delivery after cancel")
		}
	case <-time.After(cfg.ReceiveTimeout):
		t.Fatal("Receive did not return after its context was cancelled")
	}
}

// BrokerURL returns the broker URL in the environment variable name (BQ_REDIS_URL,
// …), after checking that something listens at its host. Under CI=true a missing
// variable or a silent broker fails the test; elsewhere the test is skipped. The message
// names the broker and the command that starts it.
func BrokerURL(t testing.TB, name, broker string) string {
	t.Helper()
	raw := os.Getenv(name)
	hint := fmt.Sprintf("start it with `scripts/brokers.sh up %s` and `eval \"$(scripts/brokers.sh env)\"`", broker)
	fail := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...) + "; " + hint
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: integration tests never skip)", msg)
		}
		t.Skip(msg)
	}
	if raw == "" {
		fail("%s: %s is not set", broker, name)
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		fail("%s: %s does not parse", broker, name)
		return ""
	}
	host := u.Host
	if ep := u.Query().Get("endpoint"); ep != "" {
		if eu, err := url.Parse(ep); err == nil {
			host = eu.Host
		}
	}
	for _, h := range strings.Split(host, ",") {
		conn, err := net.DialTimeout("tcp", h, 3*time.Second)
		if err != nil {
			fail("%s at %s does not answer: %v", broker, transport.Redact(raw), err)
			return ""
		}
		_ = conn.Close()
	}
	return raw
}
