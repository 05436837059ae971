// Package redisstore is an [idempotency.ClaimStore] in Redis, for a fleet of workers
// that dedupe on meta.id together, with Go workers and workers of the other BabelQueue
// SDKs on the same Redis. It is built on go-redis v9.
//
//	store, err := redisstore.New(ctx, "redis://127.0.0.1:6379/0", redisstore.WithTTL(7*24*time.Hour))
//	dedupe, err := idempotency.Middleware(store)
//	app.Use(dedupe)
//
// # Layout
//
// One string key per message id: the prefix, then meta.id byte for byte. Its value
// says what the key is:
//
//   - a remembered id holds the layout's remembered value, with no expiry or with the
//     store's TTL ([WithTTL]);
//   - a claim holds "bq-claim:" and a random token, with the lease as its expiry, so a
//     claim left by a dead worker lapses on its own.
//
// Two layouts, an option because the two SDKs that have a Redis store disagree:
//
//   - [LayoutReference] (the default): the public Go reference SDK's. Prefix
//     "bq:idemp:", remembered value "1", written as SET <key> 1 [PX ttl]. The
//     reference reads any existing key as remembered (EXISTS), so this store does the
//     same with any value that is not one of its claims. SPEC §8.1 names this layout,
//     and the Python SDK, whose helper has no shared store of its own, is used with it
//     in the interop tests.
//   - [LayoutPHP]: the PHP SDK's RedisStore. Prefix "bq:idem:", remembered value "2";
//     every other value is a claim (PHP claims with SET <key> 1 NX PX <lease ms>). A
//     PHP worker reads this store's claims as claims (not "2": it parks its delivery)
//     and its remembered ids as remembered.
//
// In both layouts a key the other SDK's worker is claiming or has remembered is read
// the way that SDK reads it, so workers of both dedupe each other's messages. A
// reference worker, which has no claims, reads a claim as remembered: it acknowledges
// its duplicate while the claimer runs the message.
//
// # Round trips
//
// Claim is one EVALSHA of a short script (GET, then SET PX when the key is free, or
// PTTL when it is claimed): checking whether the id is remembered and claiming it is one
// round trip. Remember is one SET; Seen one GET; Release one EVALSHA (compare the token,
// then DEL); Forget one DEL. So the middleware costs two round trips per message in
// either mode: one before the handler and one after it. Folding the remember into a
// later call would leave a handled message acknowledged and not remembered for a
// while, which a duplicate arriving then would run again.
package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/transport"
)

// Layout is the key layout: [idempotency.LayoutReference] (the default) or
// [idempotency.LayoutPHP]; see the package documentation.
type Layout = idempotency.Layout

// The layouts, as this package's names.
const (
	LayoutReference = idempotency.LayoutReference
	LayoutPHP       = idempotency.LayoutPHP
)

// The keys and values of the layouts.
const (
	// ReferencePrefix is the key prefix of [LayoutReference].
	ReferencePrefix = "bq:idemp:"
	// PHPPrefix is the key prefix of [LayoutPHP].
	PHPPrefix = "bq:idem:"
	// ClaimValuePrefix starts the value of a claim this store makes; a random token
	// follows.
	ClaimValuePrefix = "bq-claim:"
)

// Option configures a [Store].
type Option func(*config)

type config struct {
	layout Layout
	prefix string
	ttl    time.Duration
	errs   []error
}

func (c *config) invalid(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: redisstore: "+format, append([]any{babelqueue.ErrInvalidOption}, args...)...))
}

// WithLayout chooses the key layout (default [LayoutReference]).
func WithLayout(l Layout) Option {
	return func(c *config) {
		if l != LayoutReference && l != LayoutPHP {
			c.invalid("layout %d", int(l))
			return
		}
		c.layout = l
	}
}

// WithPrefix replaces the layout's key prefix, for instance to keep two applications'
// ids apart on one Redis. Workers that share a store must use the same prefix.
func WithPrefix(prefix string) Option {
	return func(c *config) {
		if prefix == "" {
			c.invalid("the key prefix is empty")
			return
		}
		c.prefix = prefix
	}
}

// WithTTL sets how long a remembered id is kept; Redis expires it then (PX), and a
// redelivery after that runs the message again. Zero, the default of the reference and
// PHP stores, keeps it until Forget. Choose it above the longest time a broker may take
// to redeliver a message (days, on most).
func WithTTL(ttl time.Duration) Option {
	return func(c *config) {
		if ttl < 0 {
			c.invalid("TTL %s is negative", ttl)
			return
		}
		c.ttl = ttl
	}
}

// Store is an [idempotency.ClaimStore] in Redis. Its methods are safe for concurrent
// use.
type Store struct {
	rdb        goredis.UniversalClient
	owned      bool
	layout     Layout
	prefix     string
	remembered string
	ttl        time.Duration
}

// New connects to the Redis at url (redis://, rediss:// or unix://, as go-redis parses
// it) and checks that it answers. [Store.Close] closes the connection. Credentials in
// url never appear in errors.
func New(ctx context.Context, url string, opts ...Option) (*Store, error) {
	o, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: redisstore: the URL %s does not parse", babelqueue.ErrInvalidOption, transport.Redact(url))
	}
	rdb := goredis.NewClient(o)
	s, err := NewFromClient(rdb, opts...)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	s.owned = true
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redisstore: Redis at %s does not answer: %w", o.Addr, err)
	}
	return s, nil
}

// NewFromClient returns a store on a client the caller built and keeps: [Store.Close]
// leaves it open. A cluster client works: every call touches one key.
func NewFromClient(rdb goredis.UniversalClient, opts ...Option) (*Store, error) {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if rdb == nil {
		c.invalid("the client is nil")
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	s := &Store{rdb: rdb, layout: c.layout, ttl: c.ttl, prefix: ReferencePrefix, remembered: "1"}
	if c.layout == LayoutPHP {
		s.prefix, s.remembered = PHPPrefix, "2"
	}
	if c.prefix != "" {
		s.prefix = c.prefix
	}
	return s, nil
}

// Close closes the connection when [New] opened it.
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	return s.rdb.Close()
}

// Key returns the Redis key of a message id.
func (s *Store) Key(id string) string { return s.prefix + id }

// isRemembered reads a key's value the way the layout's SDK does.
func (s *Store) isRemembered(v string) bool {
	if s.layout == LayoutReference {
		return !strings.HasPrefix(v, ClaimValuePrefix)
	}
	return v == s.remembered
}

// claimScript checks whether the id is remembered and claims it, atomically.
// KEYS[1] the key; ARGV[1] the claim value; ARGV[2] the lease in ms; ARGV[3] the
// remembered value; ARGV[4] the claim value prefix when every other value counts as
// remembered (the reference layout), else "". Answers {1} claimed, {2} remembered,
// {3, pttl} held.
var claimScript = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1}
end
if v == ARGV[3] or (ARGV[4] ~= '' and string.sub(v, 1, #ARGV[4]) ~= ARGV[4]) then
  return {2}
end
return {3, redis.call('PTTL', KEYS[1])}
`)

// releaseScript deletes KEYS[1] if it still holds the claim value ARGV[1].
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// Claim implements [idempotency.ClaimStore].
func (s *Store) Claim(ctx context.Context, id string, lease time.Duration) (idempotency.Claim, error) {
	token := rand.Text()
	referenceRule := ""
	if s.layout == LayoutReference {
		referenceRule = ClaimValuePrefix
	}
	res, err := claimScript.Run(ctx, s.rdb, []string{s.Key(id)},
		ClaimValuePrefix+token, max(lease.Milliseconds(), 1), s.remembered, referenceRule).Int64Slice()
	if err != nil {
		return idempotency.Claim{}, err
	}
	if len(res) == 0 {
		return idempotency.Claim{}, fmt.Errorf("redisstore: the claim script answered %v", res)
	}
	switch res[0] {
	case 1:
		return idempotency.Claim{Status: idempotency.Claimed, Token: token}, nil
	case 2:
		return idempotency.Claim{Status: idempotency.Remembered}, nil
	case 3:
		c := idempotency.Claim{Status: idempotency.Held}
		if len(res) > 1 && res[1] > 0 {
			c.Remaining = time.Duration(res[1]) * time.Millisecond
		}
		return c, nil
	default:
		return idempotency.Claim{}, fmt.Errorf("redisstore: the claim script answered %v", res)
	}
}

// Release implements [idempotency.ClaimStore].
func (s *Store) Release(ctx context.Context, id, token string) error {
	return releaseScript.Run(ctx, s.rdb, []string{s.Key(id)}, ClaimValuePrefix+token).Err()
}

// Seen implements [idempotency.Store].
func (s *Store) Seen(ctx context.Context, id string) (bool, error) {
	v, err := s.rdb.Get(ctx, s.Key(id)).Result()
	if errors.Is(err, goredis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return s.isRemembered(v), nil
}

// Remember implements [idempotency.Store]: SET with the layout's remembered value,
// and PX ttl when the store has a TTL.
func (s *Store) Remember(ctx context.Context, id string) error {
	return s.rdb.Set(ctx, s.Key(id), s.remembered, s.ttl).Err()
}

// Forget implements [idempotency.Store].
func (s *Store) Forget(ctx context.Context, id string) error {
	return s.rdb.Del(ctx, s.Key(id)).Err()
}

var _ idempotency.ClaimStore = (*Store)(nil)
