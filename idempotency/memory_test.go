package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
)

func memoryConfig() idempotencytest.Config {
	return idempotencytest.Config{
		NewStore: func(_ testing.TB, ttl time.Duration) idempotency.Store { return idempotency.NewMemoryStore(ttl) },
	}
}

func TestMemoryStoreKit(t *testing.T) {
	idempotencytest.Run(t, memoryConfig())
}

// The eight workers share one memory store: it is one process's memory.
func TestMemoryStoreConcurrency(t *testing.T) {
	shared := idempotency.NewMemoryStore(0)
	idempotencytest.RunConcurrency(t, idempotencytest.Config{
		NewStore: func(testing.TB, time.Duration) idempotency.Store { return shared },
	})
}

func TestMemoryStoreDeleteExpired(t *testing.T) {
	ctx := context.Background()
	s := idempotency.NewMemoryStore(50 * time.Millisecond)
	for _, id := range []string{"a", "b", "c"} {
		if err := s.Remember(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Claim(ctx, "d", time.Hour); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	n, err := s.DeleteExpired(ctx)
	if err != nil || n != 3 {
		t.Fatalf("DeleteExpired = %d, %v; want the 3 lapsed ids", n, err)
	}
	if s.Len() != 1 {
		t.Fatalf("Len = %d after DeleteExpired, want the live claim alone", s.Len())
	}
}

// Lapsed ids are dropped as the store grows, without a call to DeleteExpired.
func TestMemoryStoreSweepsAsItGrows(t *testing.T) {
	ctx := context.Background()
	s := idempotency.NewMemoryStore(time.Millisecond)
	for i := range 10000 {
		if err := s.Remember(ctx, idempotencytest.NewID()); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	if n := s.Len(); n > 4096 {
		t.Fatalf("Len = %d after 10000 ids that lapse within 1ms; lapsed ids are not swept", n)
	}
}

func BenchmarkMiddleware(b *testing.B) {
	idempotencytest.Bench(b, memoryConfig())
}

func BenchmarkCalls(b *testing.B) {
	idempotencytest.BenchCalls(b, memoryConfig(), nil)
}
