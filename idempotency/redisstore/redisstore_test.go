package redisstore_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
	"github.com/babelqueue-go/babelqueue/idempotency/redisstore"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func TestMain(m *testing.M) {
	idempotencytest.CrashChild(openStore)
	os.Exit(m.Run())
}

// openStore opens a store on $BQ_REDIS_URL in the layout spec names; the crash tests'
// child process opens its store with it too.
func openStore(ctx context.Context, spec string) (idempotency.Store, error) {
	layout := redisstore.LayoutReference
	if spec == "php" {
		layout = redisstore.LayoutPHP
	}
	return redisstore.New(ctx, os.Getenv("BQ_REDIS_URL"), redisstore.WithLayout(layout))
}

func redisURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_REDIS_URL", "redis")
}

func newStore(t testing.TB, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(context.Background(), redisURL(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func config(layout redisstore.Layout) idempotencytest.Config {
	return idempotencytest.Config{
		NewStore: func(t testing.TB, ttl time.Duration) idempotency.Store {
			if ttl == 0 {
				ttl = time.Hour // "never" for the length of a test; keeps the shared Redis clean
			}
			return newStore(t, redisstore.WithLayout(layout), redisstore.WithTTL(ttl))
		},
	}
}

func TestKit(t *testing.T) {
	for _, layout := range []redisstore.Layout{redisstore.LayoutReference, redisstore.LayoutPHP} {
		t.Run(layout.String(), func(t *testing.T) { idempotencytest.Run(t, config(layout)) })
	}
}

// Eight workers, each with its own connection, over 2,000 messages delivered twice.
func TestConcurrency(t *testing.T) {
	for _, layout := range []redisstore.Layout{redisstore.LayoutReference, redisstore.LayoutPHP} {
		t.Run(layout.String(), func(t *testing.T) { idempotencytest.RunConcurrency(t, config(layout)) })
	}
}

func TestInvalidOptions(t *testing.T) {
	ctx := context.Background()
	for name, opts := range map[string][]redisstore.Option{
		"negative TTL":   {redisstore.WithTTL(-time.Second)},
		"empty prefix":   {redisstore.WithPrefix("")},
		"unknown layout": {redisstore.WithLayout(redisstore.Layout(7))},
	} {
		if _, err := redisstore.NewFromClient(goredis.NewClient(&goredis.Options{}), opts...); !errors.Is(err, babelqueue.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := redisstore.NewFromClient(nil); !errors.Is(err, babelqueue.ErrInvalidOption) {
		t.Errorf("nil client: err = %v, want ErrInvalidOption", err)
	}
	_, err := redisstore.New(ctx, "http://user:s3cret@127.0.0.1:6379/0")
	if !errors.Is(err, babelqueue.ErrInvalidOption) {
		t.Errorf("a URL that does not parse: err = %v, want ErrInvalidOption", err)
	}
	if err != nil && strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the password: %v", err)
	}
}

// A Redis that does not answer is an error at New, without the password.
func TestNewUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := redisstore.New(ctx, "redis://user:s3cret@127.0.0.1:1/0")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("New on a closed port: err = %v; want an error without the password", err)
	}
}

// A store call to a Redis that went away is an error (the delivery is retried), never a
// guess.
func TestStoreErrorsWhenRedisIsGone(t *testing.T) {
	ctx := context.Background()
	s, err := redisstore.NewFromClient(goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seen(ctx, "x"); err == nil {
		t.Error("Seen: no error")
	}
	if _, err := s.Claim(ctx, "x", time.Second); err == nil {
		t.Error("Claim: no error")
	}
	if err := s.Remember(ctx, "x"); err == nil {
		t.Error("Remember: no error")
	}
}

func BenchmarkMiddleware(b *testing.B) {
	idempotencytest.Bench(b, config(redisstore.LayoutReference))
}

// BenchmarkCalls is each store call beside a raw round trip (PING) to the same Redis.
func BenchmarkCalls(b *testing.B) {
	rdb := rawClient(b)
	idempotencytest.BenchCalls(b, config(redisstore.LayoutReference), func(ctx context.Context) error {
		return rdb.Ping(ctx).Err()
	})
}
