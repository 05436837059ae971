package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// DefaultPublishWait is how long, by default, Publish waits for a Redis it cannot
// connect to ([WithPublishWait]).
const DefaultPublishWait = 30 * time.Second

// WithPublishWait bounds how long Publish waits for a Redis it cannot reach (the URL's
// publish_wait; default [DefaultPublishWait]; zero fails at once; PublishConfirmed
// does not wait). A publish whose connection could not be made or was lost, once
// go-redis's own retries (max_retries) gave up, tries again after a backoff (50 ms
// doubling to 1 s) within its context and this bound, then fails with the cause: past
// the bound with an error matching context.DeadlineExceeded, and when its context ends
// first with the context's error; both wrap Redis's last error.
//
// It makes again only what go-redis's retries make again: a write whose connection
// could not be dialled, or ended (EOF, reset) before the reply. go-redis cannot tell a
// connection that ended in its handshake (a write never sent: a broker going away, a
// proxy that closes what it accepts) from one whose reply was lost after Redis applied
// the write: in the second case, rare, the message is stored twice (the same bytes,
// the same meta.id), as go-redis's own retries would store it. Any other error (a
// refusal by Redis, a read timeout) fails at once, as before. A negative d is an
// error matching babelqueue.ErrInvalidOption.
func WithPublishWait(d time.Duration) Option {
	return func(t *Transport) {
		if d < 0 {
			t.bad.Invalid("WithPublishWait", "want zero (no wait) or a positive duration, got %s", d)
			return
		}
		t.publishWait = d
	}
}

// unsent reports whether err is a connection that could not be made or ended before
// its reply: what go-redis's own retries make again.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// rideOut makes write, and again after a backoff while its connection fails (unsent),
// within ctx and the publish wait ([WithPublishWait]).
func (t *Transport) rideOut(ctx context.Context, write func(ctx context.Context) error) error {
	err := write(ctx)
	if err == nil || t.publishWait <= 0 || !unsent(err) {
		return err
	}
	wait, cancel := context.WithTimeout(ctx, t.publishWait)
	defer cancel()
	last := err
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		timer := time.NewTimer(backoff)
		select {
		case <-wait.Done():
			timer.Stop()
		case <-timer.C:
			err := write(wait)
			switch {
			case err == nil:
				return nil
			case unsent(err):
				last = err
				continue
			case wait.Err() == nil:
				return err // Redis answered: its answer stands
			}
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("redis: publish: %w while waiting for Redis; its last error: %w", err, last)
		}
		return fmt.Errorf("redis: publish: Redis not back within %s (publish_wait): %w; its last error: %w",
			t.publishWait, context.DeadlineExceeded, last)
	}
}
