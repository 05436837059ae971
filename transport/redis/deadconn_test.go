package redis_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// A consumer whose connections go silent for good (kept open, no byte through, as behind
// a middlebox that forgot them) while new connections pass finds them dead within
// go-redis's read timeout, says so in the log when it happens, and resumes on new ones:
// a message published after the freeze is received within issue 38's bound of 10 s.
func TestSilentConnectionFound(t *testing.T) {
	raw := brokerURL(t)
	p, proxied := faultproxy.StartURL(t, raw)
	logs := &transporttest.LogBuffer{}
	ctx, cancel := context.WithTimeout(transport.ContextWithLogger(context.Background(),
		slog.New(slog.NewTextHandler(logs, nil))), 2*time.Minute)
	defer cancel()
	tr, err := transport.Open(ctx, proxied)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close(context.Background()) }()
	pub, err := transport.Open(ctx, raw) // the publisher is not behind the proxy
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close(context.Background()) }()
	q := transporttest.UniqueName("bqtest-silent")
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	publish := func(body string) {
		t.Helper()
		if err := pub.Publish(ctx, &transport.Message{Queue: q, Body: []byte(body), Attempts: 0}); err != nil {
			t.Fatal(err)
		}
	}
	publish(`{"n":0}`)
	if d := transporttest.Receive(t, c, 30*time.Second); string(d.Body) != `{"n":0}` {
		t.Fatalf("got %s before the freeze", d.Body)
	} else if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "no answer within the read timeout") {
		t.Fatalf("a dead connection was logged before the freeze: %s", logs.String())
	}

	p.Freeze()
	frozen := time.Now()
	time.Sleep(time.Second)
	p.Strand() // new connections pass; the ones open stay silent for good
	publish(`{"n":1}`)
	d := transporttest.Receive(t, c, 30*time.Second)
	took := time.Since(frozen)
	if string(d.Body) != `{"n":1}` {
		t.Fatalf("after the freeze the consumer got %s, want {\"n\":1}", d.Body)
	}
	if took > 10*time.Second {
		t.Fatalf("the consumer resumed %s after its connections went silent, past 10s", took.Round(100*time.Millisecond))
	}
	if !strings.Contains(logs.String(), "redis: no answer within the read timeout; the connection is dropped") {
		t.Errorf("the dead connection was not logged: %q", logs.String())
	}
	t.Logf("the consumer resumed on new connections %s after the freeze", took.Round(100*time.Millisecond))
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
}
