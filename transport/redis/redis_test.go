package redis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// brokerURL is the Redis the integration tests run against.
func brokerURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_REDIS_URL", "redis")
}

// client returns a go-redis client on the test Redis, closed at the end of the test.
func client(t testing.TB) *goredis.Client {
	t.Helper()
	opts, err := goredis.ParseURL(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newTransport builds a transport around c with opts, failing the test on an error.
func newTransport(t testing.TB, c goredis.UniversalClient, opts ...bqredis.Option) *bqredis.Transport {
	t.Helper()
	tr, err := bqredis.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// cleanKeys deletes every key of the queues a test used.
func cleanKeys(t testing.TB, c *goredis.Client, pattern string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := c.Keys(ctx, pattern).Result()
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
}

func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestKit runs every group of the behavioural kit in each layout, with and without
// deferred acks, each on queues of its own: frames unwrapped with their headers
// (default), headers from the header hash (Laravel); the processing list and the
// reserved set are what workers hold in the counts.
func TestKit(t *testing.T) {
	for i, layout := range []struct {
		name, query string
		opts        []bqredis.Option
	}{
		{"default", "", nil},
		{"laravel", "?laravel=1&prefix=bqtest:", []bqredis.Option{bqredis.WithLaravel("bqtest:")}},
		{"default-deferred-acks", "?deferred_acks=2ms", []bqredis.Option{bqredis.WithDeferredAcks(2 * time.Millisecond)}},
		{"laravel-deferred-acks", "?laravel=1&prefix=bqtest:&deferred_acks=2ms",
			[]bqredis.Option{bqredis.WithLaravel("bqtest:"), bqredis.WithDeferredAcks(2 * time.Millisecond)}},
	} {
		t.Run(layout.name, func(t *testing.T) {
			t.Parallel() // each layout on queues of its own
			raw := brokerURL(t)
			c := client(t)
			tag := fmt.Sprintf("bqtest-l%d", i)
			cleanKeys(t, c, "*"+tag+"-*")
			h := transporttest.Harness{
				Config: transporttest.Config{
					NewQueue: func(*testing.T) string { return transporttest.UniqueName(tag) },
					NoKeys:   true,
				},
				Broker: "redis",
				Stats:  transporttest.StatsOptions{AlwaysExists: true, Oldest: transporttest.OldestCreatedAt},
				OpenWithLimit: func(t *testing.T, limit int) transport.Transport {
					return newTransport(t, c, append([]bqredis.Option{bqredis.WithMaxMessageSize(limit)}, layout.opts...)...)
				},
				Adjust: func(k transporttest.Case, cfg *transporttest.Config) {
					if k == transporttest.CaseStats {
						cfg.Prefetch = 1 // exact in-flight counts
					}
				},
				Without: map[transporttest.Case]string{
					transporttest.CasePipelined: "a settlement is one Lua script that Settle waits for: nothing is pipelined",
				},
			}
			h.OpenThroughProxy(raw+layout.query, func(t *testing.T, u string) transport.Transport {
				tr, err := transport.Open(ctxT(t), u)
				if err != nil {
					t.Fatal(err)
				}
				return tr
			})
			transporttest.RunAll(t, h)
		})
	}
}

func TestOpenRejectsBadURLs(t *testing.T) {
	cases := []struct {
		url, param string
	}{
		{"redis://:s3cret@127.0.0.1:6379/0?nope=1", "nope"},
		{"redis://:s3cret@127.0.0.1:6379/0?laravel=maybe", "laravel"},
		{"redis://:s3cret@127.0.0.1:6379/0?retry_after=-5", "retry_after"},
		{"redis://:s3cret@127.0.0.1:6379/0?retry_after=0", "retry_after"},
		{"redis://:s3cret@127.0.0.1:6379/0?retry_after=soon", "retry_after"},
		{"redis://:s3cret@127.0.0.1:6379/0?prefix=x:", "prefix"},
		{"redis://:s3cret@127.0.0.1:6379/zero", "db"},
		{"rediss://:s3cret@127.0.0.1:6379/0/1", "db"},
		{"redis://:s3cret@127.0.0.1:6379/0?dial_timeout=fast", "dial_timeout"},
		{"redis://:s3cret@127.0.0.1:6379/0?deferred_acks=soon", "deferred_acks"},
		{"redis://:s3cret@127.0.0.1:6379/0?deferred_acks=-1ms", "deferred_acks"},
		{"redis://:s3cret@127.0.0.1:6379/0?deferred_acks=2h", "deferred_acks"},
	}
	for _, tc := range cases {
		t.Run(tc.param, func(t *testing.T) {
			_, err := transport.Open(context.Background(), tc.url)
			if err == nil {
				t.Fatalf("Open(%q) succeeded", transport.Redact(tc.url))
			}
			if !errors.Is(err, transport.ErrBadURL) || !errors.Is(err, transport.ErrInvalidOption) {
				t.Errorf("error %v does not match ErrBadURL and ErrInvalidOption", err)
			}
			var bad *transport.BadURLError
			if !errors.As(err, &bad) || bad.Param != tc.param {
				t.Errorf("error %v names %+v, want parameter %q", err, bad, tc.param)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error echoes the password: %v", err)
			}
		})
	}
}

func TestOpenUnreachableDoesNotEchoPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Port 1 on loopback: nothing listens there.
	_, err := transport.Open(ctx, "redis://user:s3cret@127.0.0.1:1/0?dial_timeout=1s")
	if err == nil {
		t.Fatal("Open of a port where nothing listens succeeded")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error echoes the password: %v", err)
	}
}

func TestSchemesRegistered(t *testing.T) {
	got := strings.Join(transport.Schemes(), ",")
	for _, s := range []string{"redis", "rediss"} {
		if !strings.Contains(","+got+",", ","+s+",") {
			t.Errorf("scheme %s not registered (registered: %s)", s, got)
		}
	}
}

func conformanceDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("BQ_CONFORMANCE_DIR"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return filepath.Join(dir, "..", "shared", "conformance")
		}
		if filepath.Dir(dir) == dir {
			t.Fatal("no go.work above the test")
		}
	}
}

// TestManifestPayloadIdentity runs the manifest's redis.payload_identity block: the
// fixture bytes are the list element as stored, and reserve hands them back unchanged.
func TestManifestPayloadIdentity(t *testing.T) {
	dir := conformanceDir(t)
	manifest, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatalf("conformance manifest: %v (set BQ_CONFORMANCE_DIR)", err)
	}
	file := payloadIdentityFile(t, manifest)
	fixture, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	c := client(t)
	ctx := ctxT(t)
	for _, layout := range []struct {
		name    string
		opts    []bqredis.Option
		listKey func(q string) string
	}{
		{"default", nil, func(q string) string { return q }},
		{"laravel", []bqredis.Option{bqredis.WithLaravel("queues:")}, func(q string) string { return "queues:" + q }},
	} {
		t.Run(layout.name, func(t *testing.T) {
			q := transporttest.UniqueName("bqtest")
			cleanKeys(t, c, "*"+q+"*")
			tr := newTransport(t, c, layout.opts...)
			if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: fixture}); err != nil {
				t.Fatal(err)
			}
			stored, err := c.LIndex(ctx, layout.listKey(q), 0).Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(stored, fixture) {
				t.Fatalf("stored element differs from the fixture:\n got %q\nwant %q", stored, fixture)
			}
			cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close(ctx)
			d := transporttest.Receive(t, cons, 10*time.Second)
			if !bytes.Equal(d.Body, fixture) {
				t.Fatalf("reserved body differs from the fixture:\n got %q\nwant %q", d.Body, fixture)
			}
			if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func payloadIdentityFile(t testing.TB, manifest []byte) string {
	t.Helper()
	var m struct {
		Redis struct {
			PayloadIdentity struct {
				EnvelopeFile string `json:"envelope_file"`
			} `json:"payload_identity"`
		} `json:"redis"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatal(err)
	}
	if m.Redis.PayloadIdentity.EnvelopeFile == "" {
		t.Fatal("manifest has no redis.payload_identity.envelope_file")
	}
	return m.Redis.PayloadIdentity.EnvelopeFile
}
