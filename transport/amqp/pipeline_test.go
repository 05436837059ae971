package amqp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// queueCount is the number of messages ready on q (a passive declare).
func queueCount(t *testing.T, ch *amqp091.Channel, q string) int {
	t.Helper()
	info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("passive declare %s: %v", q, err)
	}
	return info.Messages
}

// drain takes every message ready on q with basic.get (acking it) and returns the bodies.
func drain(t *testing.T, ch *amqp091.Channel, q string) []string {
	t.Helper()
	var out []string
	for {
		m, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatalf("get %s: %v", q, err)
		}
		if !ok {
			return out
		}
		out = append(out, string(m.Body))
	}
}

// TestPipelinedNackedWriteRewinds: a pipelined settle write (the default) that the
// broker nacks (a queue that rejects publishes) does not hold up Settle, which returns
// nil once the write is published, but acks nothing either: the transport rewinds the
// delivery itself and it is delivered again. Once the write can succeed the delivery is
// acked, and its write is on the target queue once.
func TestPipelinedNackedWriteRewinds(t *testing.T) {
	ctx := ctxT(t)
	q, full := newQueue(t), newQueue(t)
	ch := rawChannel(t, rawConn(t))
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(full, true, false, false, false, amqp091.Table{
		"x-max-length": int32(0), "x-overflow": "reject-publish",
	}); err != nil {
		t.Fatal(err)
	}
	// WithoutDeclare: the transport would redeclare "full" without arguments and be
	// refused before publishing anything.
	tr := openT(t, WithoutDeclare())
	body := []byte(`{"job":"urn:babel:t:pipe","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body}); err != nil {
		t.Fatal(err)
	}
	var failed transporttest.SettleFailures
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 2, SettleFailed: failed.Record})
	if err != nil {
		t.Fatal(err)
	}
	write := func(d *transport.Delivery) transport.Settlement {
		return transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: full, Body: d.Body, Attempts: 1}}}
	}
	d := receive(t, c, 30*time.Second)
	if err := c.Settle(ctx, d, write(d)); err != nil {
		t.Fatalf("pipelined Settle = %v, want nil (the write is published, its nack comes later)", err)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); !errors.Is(err, transport.ErrAlreadySettled) {
		t.Errorf("second Settle = %v, want ErrAlreadySettled", err)
	}
	d2 := receive(t, c, 30*time.Second)
	if !bytes.Equal(d2.Body, body) || d2.Redeliveries != 1 {
		t.Fatalf("after the nacked write the consumer handed out %q (redeliveries %d), want the same message redelivered", d2.Body, d2.Redeliveries)
	}
	if n := queueCount(t, ch, full); n != 0 {
		t.Fatalf("the rejecting queue holds %d messages", n)
	}
	if got := failed.Expect(t, 1, 10*time.Second); got[0].Delivery != d || got[0].Settlement.Writes[0].Queue != full {
		t.Errorf("SettleFailed reported %+v, want the first delivery and its write to %s", got[0], full)
	}
	// Make the target take writes, and settle again.
	if _, err := ch.QueueDelete(full, false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(full, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Settle(ctx, d2, write(d2)); err != nil {
		t.Fatalf("pipelined Settle: %v", err)
	}
	// Close waits for the confirm, then the ack.
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, ch, full); len(got) != 1 || got[0] != string(body) {
		t.Fatalf("%s holds %q, want the one write", full, got)
	}
	if n := queueCount(t, ch, q); n != 0 {
		t.Fatalf("%s holds %d messages after its settle write was confirmed, want 0 (acked)", q, n)
	}
	if got := failed.Got(); len(got) != 1 {
		t.Errorf("SettleFailed was called %d times, want once (the confirmed write is no failure)", len(got))
	}
}

// publishNumbered publishes n messages {"n":0} to {"n":n-1} on q, confirmed, and
// returns them.
func publishNumbered(t *testing.T, tr *Transport, q string, n int) []*transport.Message {
	t.Helper()
	msgs := make([]*transport.Message, n)
	for i := range msgs {
		msgs[i] = &transport.Message{Queue: q, Body: fmt.Appendf(nil, `{"n":%d}`, i)}
	}
	if err := tr.PublishConfirmed(ctxT(t), msgs); err != nil {
		t.Fatal(err)
	}
	return msgs
}

// TestPipelinedCloseWaitsForWrites: Close waits for the pipelined settlements in flight,
// so every delivery settled with a write before Close is acked once its write is
// confirmed: the work queue ends empty and every message is on the retry queue exactly
// once. Were a delivery acked before its write, or given back while its write was in
// flight, a message would be missing or twice.
func TestPipelinedCloseWaitsForWrites(t *testing.T) {
	ctx := ctxT(t)
	for _, mode := range []struct {
		name string
		on   bool
	}{{"pipelined", true}, {"awaited", false}} {
		t.Run(mode.name, func(t *testing.T) {
			const n = 64
			tr := openT(t, WithPipelinedSettles(mode.on))
			q, retry := newQueue(t), newQueue(t)
			msgs := publishNumbered(t, tr, q, n)
			c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: n})
			if err != nil {
				t.Fatal(err)
			}
			for range n {
				d := receive(t, c, 30*time.Second)
				st := transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: retry, Body: d.Body, Attempts: 1}}}
				if err := c.Settle(ctx, d, st); err != nil {
					t.Fatalf("Settle: %v", err)
				}
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			ch := rawChannel(t, rawConn(t))
			if left := queueCount(t, ch, q); left != 0 {
				t.Fatalf("%s holds %d messages after Close, want 0: deliveries were given back with their writes in flight", q, left)
			}
			seen := map[string]int{}
			for _, b := range drain(t, ch, retry) {
				seen[b]++
			}
			for _, m := range msgs {
				if seen[string(m.Body)] != 1 {
					t.Errorf("%s holds %s %d times, want once", retry, m.Body, seen[string(m.Body)])
				}
			}
			if len(seen) != n {
				t.Errorf("%s holds %d distinct messages, want %d", retry, len(seen), n)
			}
		})
	}
}

// TestPipelinedWritesConnectionCut: the connection is cut (the fault proxy goes down)
// while pipelined settlements are in flight. Nothing is lost: every message ends up
// back on the work queue (its delivery was not acked: the broker requeued it) or on the
// retry queue (its write was confirmed), and the settlements Settle reported failed
// are rewound as the runtime would.
func TestPipelinedWritesConnectionCut(t *testing.T) {
	ctx := ctxT(t)
	const n = 200
	proxied, cut := transporttest.ProxyURL(t, brokerURL(t))
	trCut, err := Dial(ctx, proxied, WithLogger(testLogger(t)), WithConfirmTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = trCut.Close(context.Background()) })
	tr := openT(t)
	q, retry := newQueue(t), newQueue(t)
	msgs := publishNumbered(t, tr, q, n)
	// The retry queue exists before the cut, so the check below finds it either way.
	ch := rawChannel(t, rawConn(t))
	if _, err := ch.QueueDeclare(retry, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	c, err := trCut.Consume(ctx, q, transport.ConsumeOptions{Prefetch: n})
	if err != nil {
		t.Fatal(err)
	}
	var restore func()
	for i := range n {
		d := receive(t, c, 30*time.Second)
		if i == n/2 {
			restore = cut() // mid-flight: settlements before it wait for their confirms
		}
		st := transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: retry, Body: d.Body, Attempts: 1}}}
		if err := c.Settle(ctx, d, st); err != nil {
			// What the runtime does next: rewind (the broker requeued it already).
			if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil && !errors.Is(err, transport.ErrAlreadySettled) {
				t.Fatalf("Rewind after a failed Settle: %v", err)
			}
		}
		if i >= n/2 {
			break // the deliveries after the cut are not in our hands any more
		}
	}
	restore()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Every message is back on the work queue or on the retry queue; some may be on both
	// (a write confirmed whose ack the cut lost), none on neither.
	seen := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < n && time.Now().Before(deadline) {
		for _, b := range append(drain(t, ch, q), drain(t, ch, retry)...) {
			seen[b]++
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, m := range msgs {
		if seen[string(m.Body)] == 0 {
			t.Errorf("%s is on neither queue: lost", m.Body)
		}
	}
	t.Logf("%d messages accounted for, %d copies", len(seen), func() int {
		k := 0
		for _, v := range seen {
			k += v
		}
		return k
	}())
}

// TestPipelineURL: pipeline_settles in the URL turns pipelined settle writes off and
// on, and an option given in code wins.
func TestPipelineURL(t *testing.T) {
	for _, tc := range []struct {
		query string
		opts  []Option
		want  bool
	}{
		{"", nil, true},
		{"pipeline_settles=0", nil, false},
		{"pipeline_settles=false", nil, false},
		{"pipeline_settles=1", nil, true},
		{"pipeline_settles=0", []Option{WithPipelinedSettles(true)}, true},
		{"", []Option{WithPipelinedSettles(false)}, false},
	} {
		u, err := url.Parse("amqp://guest:guest@localhost:5672/?" + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		s := defaultSettings()
		raw, err := parseURL(u, &s)
		if err != nil {
			t.Fatalf("%q: %v", tc.query, err)
		}
		for _, o := range tc.opts {
			o(&s)
		}
		if s.pipeline != tc.want {
			t.Errorf("%q with %d options: pipelined = %v, want %v", tc.query, len(tc.opts), s.pipeline, tc.want)
		}
		if pu, _ := url.Parse(raw); pu.Query().Has("pipeline_settles") {
			t.Errorf("%q: pipeline_settles passed on to amqp091: %s", tc.query, raw)
		}
	}
	u, _ := url.Parse("amqp://localhost/?pipeline_settles=maybe")
	s := defaultSettings()
	if _, err := parseURL(u, &s); !errors.Is(err, transport.ErrBadURL) {
		t.Errorf("pipeline_settles=maybe: %v, want ErrBadURL", err)
	}
}
