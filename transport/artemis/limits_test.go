package artemis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func TestOpenerLogsThroughTheAppLogger(t *testing.T) {
	u, cut := transporttest.ProxyURL(t, brokerURL(t))
	tr, logs := transporttest.OpenWithLogger(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q := transporttest.UniqueName("bqtest-log")
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	restore := cut()
	time.Sleep(200 * time.Millisecond)
	restore()
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
