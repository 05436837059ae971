package pulsar_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/pulsar"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// As a new user meets it: an App opened on a pulsar:// URL whose broker is not there
// fails at Open with one error that says so, and the Pulsar client, never built, logs
// no retries.
func TestOpenWithoutBrokerFailsAtOnce(t *testing.T) {
	var logs transporttest.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	addr := "127.0.0.1:" + strconv.Itoa(brokerproc.FreePort(t))
	_, err := babelqueue.Open(context.Background(), "pulsar://"+addr+"?connect_timeout=3s", babelqueue.WithLogger(logger))
	if !errors.Is(err, pulsar.ErrUnreachable) {
		t.Fatalf("Open without a broker = %v, want an error matching pulsar.ErrUnreachable", err)
	}
	for _, want := range []string{addr, "connect_timeout", "connection refused"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(logs.String(), "pulsar-client") {
		t.Errorf("the Pulsar client logged although Open failed:\n%s", logs.String())
	}
}

// The Pulsar client's own log lines go through the App's logger, marked as the
// client's.
func TestClientLogsThroughAppLogger(t *testing.T) {
	var logs transporttest.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	q := transporttest.UniqueName("bqtest-logs")
	a, err := babelqueue.Open(context.Background(), brokerURL(t), babelqueue.WithLogger(logger), babelqueue.WithQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(context.Background()) }()
	if _, err := a.Publish(context.Background(), "urn:babel:test:logs", map[string]any{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "component=pulsar-client") {
		t.Fatalf("no line of the Pulsar client reached the App's logger:\n%s", logs.String())
	}
}

// Every write is checked against the size limit before it reaches the client: the
// error names the broker, the queue, the size and the limit, a write at the limit goes
// through byte-exact, and a settle write over it acknowledges nothing.
func TestSizeLimit(t *testing.T) {
	const maxSize = 2048
	const limit = maxSize - pulsar.MetadataReserve
	tr := openTransport(t, "nack_delay=200ms&max_message_size="+strconv.Itoa(maxSize))
	q := transporttest.UniqueName("bqtest-size")
	ctx := context.Background()
	headers := map[string]string{"h": "v"}
	// The body, the properties (bq-attempts and the header) and the key count.
	overhead := len("bq-attempts") + len("0") + 8 + len("h") + len("v") + 8 + len("k") + 4

	err := tr.Publish(ctx, &transport.Message{Queue: q, Key: []byte("k"), Headers: headers, Body: bytes.Repeat([]byte("x"), limit-overhead+1)})
	var tl *transport.TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("Publish over the limit = %v, want a *transport.TooLargeError", err)
	}
	if tl.Broker != "pulsar" || tl.Queue != q || tl.Size != limit+1 || tl.Limit != limit {
		t.Errorf("TooLargeError = %+v, want size %d and limit %d", tl, limit+1, limit)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(limit)) {
		t.Errorf("error %q does not name the limit", err)
	}

	atLimit := bytes.Repeat([]byte("y"), limit-overhead)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Key: []byte("k"), Headers: headers, Body: atLimit}); err != nil {
		t.Fatalf("Publish at the limit: %v", err)
	}
	c := consumeOn(t, tr, q, 1)
	d := receive(t, c)
	if !bytes.Equal(d.Body, atLimit) {
		t.Fatalf("received %d bytes, want the %d published", len(d.Body), len(atLimit))
	}
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{
		{Queue: q + ".dlq", Body: bytes.Repeat([]byte("z"), limit+1)},
	}})
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("oversized settle write = %v, want ErrSettleWrite and ErrTooLarge", err)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatal(err)
	}
	d2 := receive(t, c)
	if !bytes.Equal(d2.Body, atLimit) {
		t.Fatal("the delivery whose settle write was too large did not come back")
	}
	if err := c.Settle(ctx, d2, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
}

// The default limit fits the broker's own default maxMessageSize: a message the check
// lets through at that limit, with a full envelope projection, is accepted by the real
// broker, and one byte more is refused by the transport.
func TestDefaultSizeLimitFitsTheBroker(t *testing.T) {
	tr := openTransport(t, "")
	q := transporttest.UniqueName("bqtest-size-default")
	ctx := context.Background()
	m := &transport.Message{Queue: q, Key: []byte("order-42"), Attempts: 3, Projection: transport.Projection{
		URN: "urn:babel:orders:created", TraceID: "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b", MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567",
		Lang: "go", SchemaVersion: 1, CreatedAt: time.Now().UnixMilli(),
	}}
	m.Body = []byte("{}")
	overhead := pulsar.WireSize(m) - len(m.Body)
	limit := pulsar.DefaultMaxMessageSize - pulsar.MetadataReserve

	m.Body = bytes.Repeat([]byte("x"), limit-overhead+1)
	var tl *transport.TooLargeError
	if err := tr.Publish(ctx, m); !errors.As(err, &tl) || tl.Limit != limit {
		t.Fatalf("Publish one byte over the default = %v, want a TooLargeError with limit %d", err, limit)
	}
	m.Body = m.Body[1:]
	if err := tr.Publish(ctx, m); err != nil {
		t.Fatalf("Publish at the default limit: %v", err)
	}
}

// A max_message_size above the broker's own is still caught: the client's refusal
// matches ErrTooLarge too.
func TestBrokerLimitBelowConfigured(t *testing.T) {
	tr := openTransport(t, "max_message_size="+strconv.Itoa(4*pulsar.DefaultMaxMessageSize))
	q := transporttest.UniqueName("bqtest-size-broker")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := tr.Publish(ctx, &transport.Message{Queue: q, Body: bytes.Repeat([]byte("x"), pulsar.DefaultMaxMessageSize+1<<20)})
	if !errors.Is(err, transport.ErrTooLarge) || !strings.Contains(err.Error(), "max_message_size") {
		t.Fatalf("Publish over the broker's maxMessageSize = %v, want ErrTooLarge naming max_message_size", err)
	}
}
