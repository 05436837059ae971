package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// DefaultPublishWait is how long, by default, Publish waits for a Redis it cannot
// connect to ([WithPublishWait]).
const DefaultPublishWait = 30 * time.Second

// WithPublishWait bounds how long Publish waits for a Redis it cannot reach (the URL's
// publish_wait; default [DefaultPublishWait]; zero fails at once; PublishConfirmed
// does not wait). A publish whose connection could not be made or ended before the
// reply (what go-redis's own retries make again), once those retries gave up, tries
// again after a backoff (50 ms doubling to 1 s) within its context and this bound, then
// fails with an error matching context.DeadlineExceeded (or its context's error) that
// wraps Redis's last error. A reply lost after Redis applied the write stores the
// message twice (same bytes, same meta.id), as go-redis's retries would. Any other
// error fails at once. A negative d is an error matching babelqueue.ErrInvalidOption.
func WithPublishWait(d time.Duration) Option {
	return func(t *Transport) { t.common.SetAtLeast("WithPublishWait", &t.publishWait, d, 0) }
}

// unsent reports whether err is a connection that could not be made or ended before
// its reply: what go-redis's own retries make again.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// rideOut makes write, and again while it reaches nothing (unsent), within ctx and the
// publish wait: driverkit.RideOut. go-redis keeps a command's failed dials to itself,
// so a publish whose context ends while Redis refuses connections names the last
// failed dial the transport saw (dialWatch).
func (t *Transport) rideOut(ctx context.Context, write func(ctx context.Context) error) error {
	err := driverkit.RideOut(ctx, "redis", t.publishWait, driverkit.Backoff{Min: 50 * time.Millisecond, Max: time.Second}, unsent, write)
	if err != nil && ctx.Err() != nil && !unsent(err) {
		if last := t.dials.last.Load(); last != nil {
			return fmt.Errorf("%w; the last error: %w", err, *last)
		}
	}
	return err
}

// dialWatch is a go-redis hook that keeps the last failed dial of the transport's
// client (nil again once a dial succeeds).
type dialWatch struct{ last atomic.Pointer[error] }

func (d *dialWatch) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			d.last.Store(&err)
		} else {
			d.last.Store(nil)
		}
		return c, err
	}
}

func (d *dialWatch) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (d *dialWatch) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}
