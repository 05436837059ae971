package artemis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// Issue 38: Publish rides out a 5 s cut of its connection (the default publish_wait,
// 30 s, and a context that allows it): it returns nil once Artemis is reachable again,
// and the message is in the queue once. A context that ends during the cut gets an
// error matching context.DeadlineExceeded that names the failed reconnection, and so
// does a publish_wait shorter than the cut.
func TestPublishRidesOutACut(t *testing.T) {
	proxied, cut := transporttest.ProxyURL(t, brokerURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	open := func(raw string) transport.Transport {
		tr, err := transport.Open(ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		return tr
	}
	tr := open(proxied)
	short := open(proxied + "?publish_wait=1")
	q := transporttest.UniqueName("bqtest-pubwait")
	msg := func(body string) *transport.Message {
		return &transport.Message{Queue: q, Body: []byte(`{"meta":{"id":"` + body + `"}}`)}
	}
	if err := tr.Publish(ctx, msg("before")); err != nil { // the connection is open
		t.Fatal(err)
	}

	restore := cut()
	healed := time.AfterFunc(5*time.Second, restore)
	defer healed.Stop()
	start := time.Now()
	if err := tr.Publish(ctx, msg("through")); err != nil {
		t.Fatalf("Publish through a 5 s cut: %v", err)
	}
	if took := time.Since(start); took < 4*time.Second {
		t.Errorf("Publish returned %s into a 5 s cut: it cannot have reached Artemis", took)
	}

	restore = cut()
	for _, c := range []struct {
		name string
		tr   transport.Transport
		ctx  time.Duration
	}{
		{"context ends first", tr, 1500 * time.Millisecond},
		{"publish_wait=1 ends first", short, 20 * time.Second},
	} {
		pctx, cancel := context.WithTimeout(ctx, c.ctx)
		start := time.Now()
		err := c.tr.Publish(pctx, msg("lost"))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "reconnect to") {
			t.Errorf("%s: Publish in a cut = %v, want an error matching context.DeadlineExceeded naming the failed reconnection", c.name, err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%s: Publish took %s", c.name, took)
		}
		t.Logf("%s: %s: %v", c.name, time.Since(start).Round(time.Millisecond), err)
	}
	restore()

	// What the queue holds: "before" and "through", once each.
	rd := open(brokerURL(t))
	cons, err := rd.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(context.Background())
	var got []string
	for {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		d, err := cons.Receive(rctx)
		cancel()
		if err != nil {
			break
		}
		got = append(got, string(d.Body))
		if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(strings.Join(got, "\n"), `"through"`); n != 1 || len(got) != 2 {
		t.Errorf("the queue held %q: want the message published before the cut and the one published through it, once each", got)
	}
}
