package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// Issue 38: Publish rides out a 5 s cut of its connections (the default publish_wait,
// 30 s, and a context that allows it): it returns nil once Redis is back, and the
// message is in the queue once. A context that ends during the cut gets an error
// matching context.DeadlineExceeded that names Redis's last error, and so does a
// publish_wait shorter than the cut.
func TestPublishRidesOutACut(t *testing.T) {
	raw := brokerURL(t)
	admin := client(t)
	proxied, cut := transporttest.ProxyURL(t, raw)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func(query string) transport.Transport {
		tr, err := transport.Open(ctx, proxied+query)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		return tr
	}
	tr := open("")
	short := open("?publish_wait=1")
	q := transporttest.UniqueName("bqtest-pubwait")
	t.Cleanup(func() { admin.Del(context.Background(), q, q+":waitbound", q+":ctxbound") })
	msg := func(queue, body string) *transport.Message {
		return &transport.Message{Queue: queue, Body: []byte(`{"meta":{"id":"` + body + `"}}`)}
	}
	if err := tr.Publish(ctx, msg(q, "before")); err != nil { // the connection is open
		t.Fatal(err)
	}

	restore := cut()
	healed := time.AfterFunc(5*time.Second, restore)
	defer healed.Stop()
	start := time.Now()
	if err := tr.Publish(ctx, msg(q, "through")); err != nil {
		t.Fatalf("Publish through a 5 s cut: %v", err)
	}
	if took := time.Since(start); took < 4*time.Second {
		t.Errorf("Publish returned %s into a 5 s cut: it cannot have reached Redis", took)
	}
	got, err := admin.LRange(ctx, q, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.Join(got, "\n"), `"through"`); n != 1 || len(got) != 2 {
		t.Errorf("the queue holds %d elements, %d of them the message published through the cut; want 2 and 1", len(got), n)
	}

	restore = cut()
	defer restore()
	for _, c := range []struct {
		name  string
		tr    transport.Transport
		queue string
		ctx   time.Duration
	}{
		{"context ends first", tr, q + ":ctxbound", 1500 * time.Millisecond},
		{"publish_wait=1 ends first", short, q + ":waitbound", 20 * time.Second},
	} {
		pctx, cancel := context.WithTimeout(ctx, c.ctx)
		start := time.Now()
		err := c.tr.Publish(pctx, msg(c.queue, "lost"))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last error: ") {
			t.Errorf("%s: Publish in a cut = %v, want an error matching context.DeadlineExceeded naming the lost connection", c.name, err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%s: Publish took %s", c.name, took)
		}
		t.Logf("%s: %s: %v", c.name, time.Since(start).Round(time.Millisecond), err)
	}
}
