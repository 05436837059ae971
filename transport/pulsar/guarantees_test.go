package pulsar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/pulsar"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// invalidTopics are queue names no Pulsar accepts: a malformed topic name and a topic in
// a tenant that does not exist.
var invalidTopics = []string{
	"persistent://bq-no-such-tenant/default/dlq",
	"bogus://public/default/dlq",
}

func body(s string) []byte {
	return []byte(`{"job":"urn:babel:test:` + s + `","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"q","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`)
}

func receive(t *testing.T, c transport.Consumer) *transport.Delivery {
	t.Helper()
	return transporttest.Receive(t, c, 30*time.Second)
}

func consumeOn(t *testing.T, tr transport.Transport, q string, prefetch int) transport.Consumer {
	t.Helper()
	c, err := tr.Consume(context.Background(), q, transport.ConsumeOptions{Prefetch: prefetch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// A settle write that the broker refuses acknowledges nothing: Settle returns a
// SettleWriteError naming the queue, and the Rewind the runtime then asks for makes
// Pulsar redeliver the original with a higher redelivery count. The write before the
// refused one stays made (Pulsar cannot take it back; the contract's at-least-once for
// earlier writes), and the redelivery's settle makes it again. Pipelined (the default),
// every write's producer is found before any write is handed over, so a topic that
// cannot have one fails Settle the same way with nothing written.
func TestFailedSettleWriteNacksOriginal(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		for _, bad := range invalidTopics {
			t.Run(fmt.Sprintf("pipelined=%v/%s", pipelined, bad), func(t *testing.T) {
				testFailedSettleWrite(t, bad, pipelined)
			})
		}
	}
}

func testFailedSettleWrite(t *testing.T, bad string, pipelined bool) {
	tr := openTransport(t, "", pulsar.WithNackRedeliveryDelay(200*time.Millisecond), pulsar.WithSendTimeout(20*time.Second),
		pulsar.WithPipelinedSettles(pipelined))
	q := transporttest.UniqueName("bqtest-failwrite")
	ctx := context.Background()
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body("a")}); err != nil {
		t.Fatal(err)
	}
	c := consumeOn(t, tr, q, 4)
	d := receive(t, c)
	good := transporttest.UniqueName("bqtest-failwrite-ok")
	first := &transport.Message{Queue: good, Body: []byte(`{"first":"write"}`)}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err := c.Settle(sctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{
		first,
		{Queue: bad, Body: []byte(`{"dead":"letter"}`)},
		{Queue: good, Body: []byte(`{"never":"made"}`)},
	}})
	if !errors.Is(err, transport.ErrSettleWrite) {
		t.Fatalf("Settle with a refused write = %v, want ErrSettleWrite", err)
	}
	var swe *transport.SettleWriteError
	if !errors.As(err, &swe) || swe.Queue != bad {
		t.Fatalf("error %v does not name the queue %q", err, bad)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatalf("Rewind after the failed write: %v", err)
	}
	d2 := receive(t, c)
	if !bytes.Equal(d2.Body, d.Body) || d2.Redeliveries <= d.Redeliveries {
		t.Fatalf("redelivered %q with Redeliveries %d (was %d)", d2.Body, d2.Redeliveries, d.Redeliveries)
	}
	if err := c.Settle(ctx, d2, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{first}}); err != nil {
		t.Fatal(err)
	}
	// Awaited, the first write was made by the failed settle and again by the
	// second; pipelined, by the second only. The write after the refused one never
	// was.
	made := 2
	if pipelined {
		made = 1
	}
	cg := consumeOn(t, tr, good, 4)
	for range made {
		w := receive(t, cg)
		if !bytes.Equal(w.Body, first.Body) {
			t.Fatalf("%s holds %q, want only the first write", good, w.Body)
		}
		if err := cg.Settle(ctx, w, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	transporttest.ExpectNothing(t, cg, time.Second)
}

// Closing the transport closes its consumers: a delivery still held cannot be settled
// afterwards (the error matches ErrClosed), nothing is acknowledged, and the broker
// gives the message to the next consumer.
func TestSettleWriteAfterCloseLosesNothing(t *testing.T) {
	tr := openTransport(t, "")
	q := transporttest.UniqueName("bqtest-closed")
	ctx := context.Background()
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body("closed")}); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, c)
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: q + ".dlq", Body: []byte(`{}`)}}})
	if !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("settle on a closed transport = %v, want ErrClosed", err)
	}
	if _, err := c.Receive(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Receive on a consumer of a closed transport = %v, want ErrClosed", err)
	}
	tr2 := openTransport(t, "")
	c2 := consumeOn(t, tr2, q, 1)
	d2 := receive(t, c2)
	if !bytes.Equal(d2.Body, d.Body) {
		t.Fatalf("got %q, want the unacknowledged message back", d2.Body)
	}
	if err := c2.Settle(ctx, d2, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
}

// The runtime end to end: when the dead-letter write fails, the original is negatively
// acknowledged and comes back, so the handler runs again and nothing is lost.
func TestRuntimeFailedDeadLetterWriteRedelivers(t *testing.T) {
	tr := openTransport(t, "", pulsar.WithNackRedeliveryDelay(200*time.Millisecond))
	q := transporttest.UniqueName("bqtest-rt-faildlq")
	a, err := babelqueue.New(tr,
		babelqueue.WithQueue(q),
		babelqueue.WithMaxAttempts(1),
		babelqueue.WithDeadLetter(true),
		babelqueue.WithDeadLetterQueue(invalidTopics[0]),
		babelqueue.WithLogger(quietLogger()),
		babelqueue.WithShutdownGrace(5*time.Second),
	)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ids []string
	a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		mu.Lock()
		ids = append(ids, m.ID())
		mu.Unlock()
		return errors.New("always fails")
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	id, err := a.Publish(context.Background(), "urn:babel:orders:created", map[string]any{"order_id": 1})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(ids)
		mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handler ran %d times; a failed dead-letter write must bring the message back", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	mu.Lock()
	for _, got := range ids {
		if got != id {
			t.Errorf("handler saw message %s, want only %s", got, id)
		}
	}
	mu.Unlock()
	// The message is still on the queue.
	c := consumeOn(t, openTransport(t, ""), q, 1)
	d := receive(t, c)
	if !bytes.Contains(d.Body, []byte(id)) {
		t.Fatalf("queue holds %q, want message %s", d.Body, id)
	}
	_ = c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Ack})
}

// Keys are byte-exact, including bytes that are not UTF-8; an empty key is written as
// no key, because the Pulsar Go client cannot send one (documented).
func TestKeys(t *testing.T) {
	tr := openTransport(t, "")
	q := transporttest.UniqueName("bqtest-keys")
	ctx := context.Background()
	bin := []byte{0xff, 0x00, 'k', 0xc3}
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body("bin"), Key: bin}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body("empty"), Key: []byte{}}); err != nil {
		t.Fatal(err)
	}
	c := consumeOn(t, tr, q, 4)
	for range 2 {
		d := receive(t, c)
		switch {
		case bytes.Contains(d.Body, []byte("test:bin")):
			if !bytes.Equal(d.Key, bin) {
				t.Errorf("binary key = %q, want %q", d.Key, bin)
			}
		case bytes.Contains(d.Body, []byte("test:empty")):
			if d.Key != nil {
				t.Errorf("empty key came back as %q, want nil (Pulsar Go client has no empty key)", d.Key)
			}
		}
		_ = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack})
	}
}

// What another producer writes is data: properties the binding does not know are
// headers, a bq-attempts that is not a number is no attempts header, one that is is
// read as written (a negative one too: the kit's one coercion, driverkit.ParseAttempts;
// the runtime decides what it means), and the binding's own properties never show up
// as headers.
func TestForeignMessages(t *testing.T) {
	tr := openTransport(t, "")
	q := transporttest.UniqueName("bqtest-foreign")
	raw := rawClient(t)
	p, err := raw.CreateProducer(pc.ProducerOptions{Topic: q, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	msgs := []*pc.ProducerMessage{
		{Payload: []byte(`{"n":1}`), Properties: map[string]string{"bq-attempts": "two", "bq-job": "urn:x", "x-custom": "v"}},
		{Payload: []byte{0xff}, Properties: map[string]string{"bq-attempts": "-3"}},
		{Payload: []byte(`{"n":4}`), Properties: map[string]string{"bq-attempts": "4", "bq-created-at": "1"}},
	}
	for _, m := range msgs {
		if _, err := p.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	c := consumeOn(t, tr, q, 8)
	for range msgs {
		d := receive(t, c)
		switch string(d.Body) {
		case `{"n":1}`:
			if d.HasAttemptsHeader || d.Headers["x-custom"] != "v" || len(d.Headers) != 1 {
				t.Errorf("foreign message 1: attempts header %v, headers %v", d.HasAttemptsHeader, d.Headers)
			}
		case "\xff":
			if !d.HasAttemptsHeader || d.AttemptsHeader != -3 {
				t.Errorf("bq-attempts -3 read as %d/%v, want -3 as written", d.AttemptsHeader, d.HasAttemptsHeader)
			}
		case `{"n":4}`:
			if !d.HasAttemptsHeader || d.AttemptsHeader != 4 || d.Headers["bq-created-at"] != "1" {
				t.Errorf("message 4: attempts %d/%v, headers %v", d.AttemptsHeader, d.HasAttemptsHeader, d.Headers)
			}
		default:
			t.Errorf("unexpected body %q", d.Body)
		}
		_ = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack})
	}
}

// A header never replaces a projected property.
func TestHeadersNeverReplaceProjection(t *testing.T) {
	tr := openTransport(t, "")
	q := transporttest.UniqueName("bqtest-hdr")
	ctx := context.Background()
	m := &transport.Message{
		Queue: q, Body: body("h"), Attempts: 2,
		Headers:    map[string]string{"bq-job": "urn:forged", "bq-attempts": "9", "tenant": "acme"},
		Projection: transport.Projection{URN: "urn:babel:test:h", SchemaVersion: 1},
	}
	if err := tr.Publish(ctx, m); err != nil {
		t.Fatal(err)
	}
	got := rawReceive(t, rawSubscribe(t, rawClient(t), q)).Properties()
	want := map[string]string{"bq-job": "urn:babel:test:h", "bq-schema-version": "1", "bq-attempts": "2", "tenant": "acme"}
	if len(got) != len(want) {
		t.Errorf("properties = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("property %q = %q, want %q", k, got[k], v)
		}
	}
}

// A bare queue name is the topic persistent://public/default/<name>.
func TestBareNameIsDefaultNamespaceTopic(t *testing.T) {
	tr := openTransport(t, "")
	q := transporttest.UniqueName("bqtest-bare")
	ctx := context.Background()
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body("bare")}); err != nil {
		t.Fatal(err)
	}
	full := "persistent://public/default/" + q
	c := consumeOn(t, tr, full, 1)
	d := receive(t, c)
	if d.Queue != full || !bytes.Equal(d.Body, body("bare")) {
		t.Errorf("delivery from %q: %q", d.Queue, d.Body)
	}
	_ = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack})
}

// Every subscription type delivers, rewinds and settles; subscriptions are independent.
func TestSubscriptionTypes(t *testing.T) {
	q := transporttest.UniqueName("bqtest-subtypes")
	pub := openTransport(t, "")
	ctx := context.Background()
	if err := pub.Publish(ctx, &transport.Message{Queue: q, Body: body("sub")}); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	for _, typ := range []string{"shared", "exclusive", "failover", "key_shared"} {
		t.Run(typ, func(t *testing.T) {
			tr := openTransport(t, "subscription=sub-"+typ+"&subscription_type="+typ, pulsar.WithNackRedeliveryDelay(200*time.Millisecond))
			c := consumeOn(t, tr, q, 2)
			d := receive(t, c)
			if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
				t.Fatal(err)
			}
			d = receive(t, c)
			if !bytes.Equal(d.Body, body("sub")) {
				t.Fatalf("got %q", d.Body)
			}
			if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
				t.Fatal(err)
			}
			n.Add(1)
		})
	}
	if n.Load() != 4 {
		t.Errorf("%d of 4 subscriptions received the message", n.Load())
	}
}

// The Pulsar Go client discards a received message whose payload is empty as corrupt,
// so the transport refuses to write one rather than lose it.
func TestEmptyBodyRefused(t *testing.T) {
	tr := openTransport(t, "")
	err := tr.Publish(context.Background(), &transport.Message{Queue: transporttest.UniqueName("bqtest-empty"), Body: nil})
	if !errors.Is(err, pulsar.ErrEmptyBody) {
		t.Fatalf("Publish of an empty body = %v, want ErrEmptyBody", err)
	}
}
