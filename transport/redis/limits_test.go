package redis_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
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

// What Redis stores is the header frame around a body: it counts (the kit's size cases
// run in TestKit).
func TestSizeLimitCountsTheFrame(t *testing.T) {
	c := client(t)
	cleanKeys(t, c, "*bqtest-size-*")
	tr := newTransport(t, c, bqredis.WithMaxMessageSize(transporttest.SizeLimit))
	err := tr.Publish(ctxT(t), &transport.Message{Queue: transporttest.UniqueName("bqtest-size"), Body: []byte(`{}`),
		Headers: map[string]string{"traceparent": strings.Repeat("0", transporttest.SizeLimit)}})
	if !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("Publish whose header frame is over the limit = %v, want ErrTooLarge", err)
	}
}

func TestOpenerLogsThroughTheAppLogger(t *testing.T) {
	tr, logs := transporttest.OpenWithLogger(t, brokerURL(t))
	bqredis.LogForTest(tr, "probe from the test")
	if !strings.Contains(logs.String(), "probe from the test") {
		t.Fatalf("the transport does not log through the opener's logger; got %q", logs.String())
	}
	// go-redis logs a pool that cannot dial; the line reaches the opener's logger.
	dctx, cancel := context.WithTimeout(transport.ContextWithLogger(context.Background(), slog.New(slog.NewTextHandler(logs, nil))), 5*time.Second)
	defer cancel()
	if _, err := transport.Open(dctx, "redis://127.0.0.1:1/0?dial_timeout=200ms&max_retries=0"); err == nil {
		t.Fatal("Open of a port where nothing listens succeeded")
	}
	if !strings.Contains(logs.String(), "go-redis") {
		t.Fatalf("go-redis's own line about the failed dial did not reach the opener's logger: %q", logs.String())
	}
}

// A bad option value given in code is an error from New naming the option, matching
// babelqueue.ErrInvalidOption: none is silently ignored (issue 32).
func TestBadOptionValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  bqredis.Option
	}{
		{"WithRetryAfter", bqredis.WithRetryAfter(-time.Second)},
		{"WithPollInterval", bqredis.WithPollInterval(0)},
		{"WithBatch", bqredis.WithBatch(0)},
		{"WithDeferredAcks", bqredis.WithDeferredAcks(-time.Millisecond)},
		{"WithMaxMessageSize", bqredis.WithMaxMessageSize(-1)},
	} {
		tr, err := bqredis.New(nil, tc.opt)
		if tr != nil || !errors.Is(err, babelqueue.ErrInvalidOption) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("New with a bad %s = %v, %v; want an error naming it that matches ErrInvalidOption", tc.name, tr, err)
		}
	}
	// The zero values that mean "off" are no error.
	if _, err := bqredis.New(nil, bqredis.WithRetryAfter(0), bqredis.WithDeferredAcks(0)); err != nil {
		t.Errorf("WithRetryAfter(0), WithDeferredAcks(0): %v", err)
	}
}
