package artemis_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/artemis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// A body longer than the configured limit fails before it is sent, with the limit in
// the error; an oversized settle write acknowledges nothing.
func TestSizeLimit(t *testing.T) {
	tr := openTransport(t, artemis.WithMaxMessageSize(64))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := transporttest.UniqueName("bqtest-size")
	big := []byte(`{"job":"urn:babel:x:y","data":"` + strings.Repeat("x", 64) + `"}`)
	err := tr.Publish(ctx, &transport.Message{Queue: q, Body: big})
	var tl *transport.TooLargeError
	if !errors.As(err, &tl) || tl.Limit != 64 || tl.Size != len(big) || tl.Broker != "artemis" {
		t.Fatalf("Publish of %d bytes with a limit of 64 = %v, want a TooLargeError", len(big), err)
	}
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	d := transporttest.Receive(t, c, 30*time.Second)
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: q, Body: big}}})
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("an oversized settle write = %v, want ErrSettleWrite and ErrTooLarge", err)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatalf("Rewind after the refused write: %v", err)
	}
	d = transporttest.Receive(t, c, 30*time.Second)
	if string(d.Body) != `{"n":1}` {
		t.Fatalf("after the refused write the queue handed out %q", d.Body)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	transporttest.ExpectNothing(t, c, time.Second)
}

// A transport opened by URL logs through the logger the runtime hands its opener: a
// lost connection is reported there.
func TestOpenerLogsThroughTheAppLogger(t *testing.T) {
	u, err := url.Parse(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	u.Host = p.Addr()
	logs := &transporttest.LogBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := transport.Open(transport.ContextWithLogger(ctx, slog.New(slog.NewTextHandler(logs, nil))), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	q := transporttest.UniqueName("bqtest-log")
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	p.Down()
	time.Sleep(200 * time.Millisecond)
	p.Up()
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`)}); err != nil {
		t.Fatalf("publish after the connection came back: %v", err)
	}
	if out := logs.String(); !strings.Contains(out, "artemis: connection lost") && !strings.Contains(out, "artemis: reconnected") {
		t.Fatalf("the lost connection was not logged through the opener's logger: %q", logs.String())
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for range 2 {
		d := transporttest.Receive(t, c, 30*time.Second)
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
}
