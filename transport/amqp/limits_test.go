package amqp

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// A body longer than the broker's max_message_size fails before it is sent, with the
// limit in the error; an oversized settle write acknowledges nothing.
func TestSizeLimit(t *testing.T) {
	tr := openT(t, WithMaxMessageSize(64))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := newQueue(t)
	big := []byte(`{"job":"urn:babel:x:y","data":"` + strings.Repeat("x", 64) + `"}`)
	err := tr.Publish(ctx, &transport.Message{Queue: q, Body: big})
	var tl *transport.TooLargeError
	if !errors.As(err, &tl) || tl.Limit != 64 || tl.Size != len(big) || tl.Broker != "amqp" {
		t.Fatalf("Publish of %d bytes with a limit of 64 = %v, want a TooLargeError", len(big), err)
	}
	err = tr.PublishConfirmed(ctx, []*transport.Message{{Queue: q, Body: []byte(`{"n":1}`)}, {Queue: q, Body: big}, {Queue: q, Body: []byte(`{"n":3}`)}})
	var be *transport.BatchError
	if !errors.As(err, &be) || !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("PublishConfirmed with an oversized message = %v, want a BatchError matching ErrTooLarge", err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	d := receive(t, c, 30*time.Second)
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: q, Body: big}}})
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("an oversized settle write = %v, want ErrSettleWrite and ErrTooLarge", err)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatalf("Rewind after the refused write: %v", err)
	}
	d = receive(t, c, 30*time.Second)
	if string(d.Body) != `{"n":1}` {
		t.Fatalf("after the refused write the queue handed out %q, want the rewound {\"n\":1}", d.Body)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	d = receive(t, c, 30*time.Second)
	if string(d.Body) != `{"n":3}` {
		t.Fatalf("the batch wrote %q after the refused message, want {\"n\":3}", d.Body)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
}

// A transport opened by URL logs through the logger the runtime hands its opener.
func TestOpenerLogsThroughTheAppLogger(t *testing.T) {
	logs := &transporttest.LogBuffer{}
	ctx := transport.ContextWithLogger(context.Background(), slog.New(slog.NewTextHandler(logs, nil)))
	tr, err := transport.Open(ctx, brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	tr.(*Transport).log.Warn("probe from the test")
	if !strings.Contains(logs.String(), "probe from the test") {
		t.Fatalf("the transport does not log through the opener's logger; got %q", logs.String())
	}
}
