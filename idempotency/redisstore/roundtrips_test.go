package redisstore_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
	"github.com/babelqueue-go/babelqueue/idempotency/redisstore"
)

// roundTrips counts the commands (and pipelines) a go-redis client sends: each is one
// round trip.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (r *roundTrips) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// The middleware costs two round trips per message in either mode: the claim (check
// and claim in one script call) or the check before the handler, the remember after.
func TestRoundTripsPerMessage(t *testing.T) {
	const n = 200
	for _, c := range []struct {
		mode idempotency.Mode
		want string
	}{
		{idempotency.ModeClaim, "EVALSHA + SET"},
		{idempotency.ModeSeenSet, "GET + SET"},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			rdb := rawClient(t)
			count := &roundTrips{}
			rdb.AddHook(count)
			s, err := redisstore.NewFromClient(rdb)
			if err != nil {
				t.Fatal(err)
			}
			idempotencytest.RunMessages(t, s, c.mode, 5) // loads the claim script
			count.n.Store(0)
			idempotencytest.RunMessages(t, s, c.mode, n)
			if got := count.n.Load(); got != 2*n {
				t.Fatalf("%d round trips for %d messages (%.2f each), want 2 each (%s)", got, n, float64(got)/n, c.want)
			}
		})
	}
}
