package redis_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// The URL's durations follow the grammar every driver shares: a Go duration or a bare
// number in the parameter's unit (seconds for retry_after, milliseconds for
// deferred_acks).
func TestURLDurationGrammar(t *testing.T) {
	cases := []struct {
		query         string
		retry, linger time.Duration
		laravel       bool
	}{
		{"", bqredis.DefaultRetryAfter, 0, false},
		{"?retry_after=90", 90 * time.Second, 0, false},
		{"?retry_after=1500ms", 1500 * time.Millisecond, 0, false},
		{"?retry_after=0.5", 500 * time.Millisecond, 0, false},
		{"?retry_after=null", 0, 0, false},
		{"?deferred_acks=2ms", bqredis.DefaultRetryAfter, 2 * time.Millisecond, false},
		{"?deferred_acks=5", bqredis.DefaultRetryAfter, 5 * time.Millisecond, false},
		{"?deferred_acks=0", bqredis.DefaultRetryAfter, 0, false},
		{"?laravel=true", bqredis.DefaultRetryAfter, 0, true},
		{"?laravel=on", bqredis.DefaultRetryAfter, 0, true},
		{"?laravel=", bqredis.DefaultRetryAfter, 0, false},
	}
	for _, c := range cases {
		retry, linger, laravel, err := bqredis.URLOptionsForTest("redis://127.0.0.1:6379/0" + c.query)
		if err != nil || retry != c.retry || linger != c.linger || laravel != c.laravel {
			t.Errorf("%q: retry_after %s, linger %s, laravel %v, err %v; want %s, %s, %v", c.query, retry, linger, laravel, err, c.retry, c.linger, c.laravel)
		}
	}
	_, _, _, err := bqredis.URLOptionsForTest("redis://127.0.0.1:6379/0?retry_after=30&retry_after=60")
	var bad *transport.BadURLError
	if !errors.As(err, &bad) || bad.Param != "retry_after" {
		t.Errorf("a repeated parameter: %v, want a BadURLError naming it", err)
	}
}

// A message longer than Redis stores fails before it is sent, with the limit in the
// error; an oversized settle write acknowledges nothing.
func TestSizeLimit(t *testing.T) {
	c := client(t)
	cleanKeys(t, c, "*bqtest-size-*")
	tr := bqredis.New(c, bqredis.WithMaxMessageSize(64))
	defer tr.Close(context.Background())
	ctx := ctxT(t)
	q := transporttest.UniqueName("bqtest-size")
	big := []byte(`{"job":"urn:babel:x:y","data":"` + strings.Repeat("x", 64) + `"}`)
	err := tr.Publish(ctx, &transport.Message{Queue: q, Body: big})
	var tl *transport.TooLargeError
	if !errors.As(err, &tl) || tl.Limit != 64 || tl.Size != len(big) || tl.Broker != "redis" {
		t.Fatalf("Publish of %d bytes with a limit of 64 = %v, want a TooLargeError", len(big), err)
	}
	// A small body with headers: the frame is what Redis stores, and it is too long.
	err = tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`), Headers: map[string]string{"traceparent": strings.Repeat("0", 60)}})
	if !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("Publish whose header frame is over the limit = %v, want ErrTooLarge", err)
	}
	err = tr.PublishConfirmed(ctx, []*transport.Message{{Queue: q, Body: []byte(`{"n":1}`)}, {Queue: q, Body: big}, {Queue: q, Body: []byte(`{"n":3}`)}})
	var be *transport.BatchError
	if !errors.As(err, &be) || !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("PublishConfirmed with an oversized message = %v, want a BatchError matching ErrTooLarge", err)
	}
	cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(context.Background())
	d := transporttest.Receive(t, cons, 10*time.Second)
	err = cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: q + ".dlq", Body: big}}})
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("an oversized settle write = %v, want ErrSettleWrite and ErrTooLarge", err)
	}
	if n := c.LLen(ctx, q+":processing").Val(); n != 1 {
		t.Fatalf("%d reservations after the refused settle write, want 1 (nothing acknowledged)", n)
	}
	if n := c.Exists(ctx, q+".dlq").Val(); n != 0 {
		t.Fatal("the refused settle write reached Redis")
	}
	if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatalf("Ack after the refused write: %v", err)
	}
	d = transporttest.Receive(t, cons, 10*time.Second)
	if string(d.Body) != `{"n":3}` {
		t.Fatalf("the batch wrote %q after the refused message, want {\"n\":3}", d.Body)
	}
	if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
}

// A transport opened by URL logs through the logger the runtime hands its opener, and
// so do go-redis's own lines.
func TestOpenerLogsThroughTheAppLogger(t *testing.T) {
	logs := &transporttest.LogBuffer{}
	ctx := transport.ContextWithLogger(context.Background(), slog.New(slog.NewTextHandler(logs, nil)))
	tr, err := transport.Open(ctx, brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	bqredis.LogForTest(tr, "probe from the test")
	if !strings.Contains(logs.String(), "probe from the test") {
		t.Fatalf("the transport does not log through the opener's logger; got %q", logs.String())
	}
	// go-redis logs a pool that cannot dial; the line reaches the opener's logger.
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := transport.Open(dctx, "redis://127.0.0.1:1/0?dial_timeout=200ms&max_retries=0"); err == nil {
		t.Fatal("Open of a port where nothing listens succeeded")
	}
	if !strings.Contains(logs.String(), "go-redis") {
		t.Fatalf("go-redis's own line about the failed dial did not reach the opener's logger: %q", logs.String())
	}
}
