package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
	"github.com/babelqueue-go/babelqueue/idempotency/redisstore"
)

// The other SDKs' workers write and read the same keys. Their commands, as their stores
// send them (the Go reference SDK's idempotency-redis, the PHP SDK's RedisStore), are
// sent here with a plain client: what they write, this store reads as they mean it, and
// what this store writes, they read as this store means it.

func rawClient(t testing.TB) *goredis.Client {
	t.Helper()
	o, err := goredis.ParseURL(redisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestReferenceLayout(t *testing.T) {
	ctx := context.Background()
	rdb := rawClient(t)
	s := newStore(t, redisstore.WithTTL(time.Hour))
	key := func(id string) string { return "bq:idemp:" + id }

	t.Run("an id the reference remembered (SET key 1 NX PX ttl) is remembered here", func(t *testing.T) {
		id := idempotencytest.NewID()
		if ok, err := rdb.SetNX(ctx, key(id), "1", time.Hour).Result(); err != nil || !ok {
			t.Fatalf("SETNX: %v %v", ok, err)
		}
		idempotencytest.WantSeen(t, s, id, true)
		idempotencytest.WantClaim(t, s, id, idempotency.Remembered)
		if err := s.Forget(ctx, id); err != nil {
			t.Fatal(err)
		}
		if n, _ := rdb.Exists(ctx, key(id)).Result(); n != 0 {
			t.Fatal("Forget left the reference's key")
		}
	})
	t.Run("an id the reference remembered without a TTL is remembered here", func(t *testing.T) {
		id := idempotencytest.NewID()
		rdb.SetNX(ctx, key(id), "1", 0)
		t.Cleanup(func() { rdb.Del(ctx, key(id)) })
		idempotencytest.WantSeen(t, s, id, true)
		idempotencytest.WantClaim(t, s, id, idempotency.Remembered)
	})
	t.Run("what this store remembers the reference reads as remembered (EXISTS), value 1 with the TTL", func(t *testing.T) {
		id := idempotencytest.NewID()
		if err := s.Remember(ctx, id); err != nil {
			t.Fatal(err)
		}
		if v, err := rdb.Get(ctx, key(id)).Result(); err != nil || v != "1" {
			t.Fatalf("GET %s = %q, %v; want \"1\"", key(id), v, err)
		}
		if ttl := rdb.PTTL(ctx, key(id)).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
			t.Fatalf("PTTL = %s, want the store's 1h TTL", ttl)
		}
		// The reference's Claim/Remember is SET NX: it finds the key and writes nothing.
		if ok, _ := rdb.SetNX(ctx, key(id), "1", 0).Result(); ok {
			t.Fatal("the reference's SET NX won on a remembered id")
		}
	})
	t.Run("a claim is a key the reference reads as remembered, lapsing with the lease", func(t *testing.T) {
		id := idempotencytest.NewID()
		idempotencytest.WantClaim(t, s, id, idempotency.Claimed)
		v := rdb.Get(ctx, key(id)).Val()
		if !strings.HasPrefix(v, redisstore.ClaimValuePrefix) {
			t.Fatalf("claim value %q, want %s<token>", v, redisstore.ClaimValuePrefix)
		}
		if n := rdb.Exists(ctx, key(id)).Val(); n != 1 {
			t.Fatal("the reference's EXISTS does not see the claim")
		}
		if ttl := rdb.PTTL(ctx, key(id)).Val(); ttl <= 0 || ttl > time.Minute {
			t.Fatalf("PTTL = %s, want the 1m lease", ttl)
		}
		idempotencytest.WantSeen(t, s, id, false)
	})
	t.Run("prefix option", func(t *testing.T) {
		id := idempotencytest.NewID()
		p := newStore(t, redisstore.WithPrefix("app2:idemp:"), redisstore.WithTTL(time.Minute))
		if err := p.Remember(ctx, id); err != nil {
			t.Fatal(err)
		}
		if v := rdb.Get(ctx, "app2:idemp:"+id).Val(); v != "1" {
			t.Fatalf("GET app2:idemp:<id> = %q", v)
		}
		idempotencytest.WantSeen(t, s, id, false) // the default prefix does not see it
	})
}

func TestPHPLayout(t *testing.T) {
	ctx := context.Background()
	rdb := rawClient(t)
	s := newStore(t, redisstore.WithLayout(redisstore.LayoutPHP))
	key := func(id string) string { return "bq:idem:" + id }
	phpClaim := func(id string) bool { // SET key 1 PX <ttl_ms> NX
		ok, err := rdb.SetNX(ctx, key(id), "1", time.Hour).Result()
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	phpSeen := func(id string) bool { return rdb.Get(ctx, key(id)).Val() == "2" }

	t.Run("a PHP worker's claim holds this store's workers off", func(t *testing.T) {
		id := idempotencytest.NewID()
		t.Cleanup(func() { rdb.Del(ctx, key(id)) })
		if !phpClaim(id) {
			t.Fatal("PHP claim failed on a fresh id")
		}
		c := idempotencytest.WantClaim(t, s, id, idempotency.Held)
		if c.Remaining <= 59*time.Minute {
			t.Fatalf("Remaining = %s, want the PHP claim's hour", c.Remaining)
		}
		idempotencytest.WantSeen(t, s, id, false)
		// PHP commits: SET key 2 (no expiry).
		rdb.Set(ctx, key(id), "2", 0)
		idempotencytest.WantSeen(t, s, id, true)
		idempotencytest.WantClaim(t, s, id, idempotency.Remembered)
	})
	t.Run("this store's claim parks a PHP worker; its remember is PHP's seen", func(t *testing.T) {
		id := idempotencytest.NewID()
		t.Cleanup(func() { rdb.Del(ctx, key(id)) })
		c := idempotencytest.WantClaim(t, s, id, idempotency.Claimed)
		if phpSeen(id) {
			t.Fatal("PHP's seen() reads a claim as committed")
		}
		if phpClaim(id) {
			t.Fatal("PHP's claim() won over this store's claim")
		}
		// PHP's release deletes only its own claim value "1".
		rdb.Eval(ctx, "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end", []string{key(id)}, "1")
		idempotencytest.WantClaim(t, s, id, idempotency.Held)
		if err := s.Remember(ctx, id); err != nil {
			t.Fatal(err)
		}
		if !phpSeen(id) {
			t.Fatalf("PHP's seen() = false after Remember; value %q", rdb.Get(ctx, key(id)).Val())
		}
		if ttl := rdb.PTTL(ctx, key(id)).Val(); ttl != -1 {
			t.Fatalf("PTTL = %s, want no expiry (the PHP store's commit, and this store without a TTL)", ttl)
		}
		if err := s.Release(ctx, id, c.Token); err != nil {
			t.Fatal(err)
		}
		if !phpSeen(id) {
			t.Fatal("a late Release dropped the remembered id")
		}
	})
	t.Run("a PHP claim that lapsed is taken over", func(t *testing.T) {
		id := idempotencytest.NewID()
		t.Cleanup(func() { rdb.Del(ctx, key(id)) })
		rdb.SetNX(ctx, key(id), "1", 100*time.Millisecond)
		time.Sleep(150 * time.Millisecond)
		idempotencytest.WantClaim(t, s, id, idempotency.Claimed)
	})
}
