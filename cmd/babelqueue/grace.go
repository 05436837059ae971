package main

import (
	"context"
	"time"
)

// DefaultGrace is how long a long-running command (outbox relay, console) may take to
// stop after SIGTERM or Ctrl-C (its -grace): what it has in hand, its report and its
// close together. Without it, a command whose database or broker went silent would
// wait out each call's own timeout (the relay's batch: the store timeout twice and the
// batch timeout, 50 s; the console's redrive: its settle timeout, 30 s, then the
// server's 5 s and the broker's close).
const DefaultGrace = 20 * time.Second

// graceful runs f, which returns some time after ctx ends. Once ctx ended, f has
// grace to return; after that graceful returns over true without waiting for it, and
// the command exits without closing what it opened (a close would wait on the
// connection that did not answer). bound bounds each step the command takes after f
// returned: at most d, and nothing past the grace once ctx ended.
func graceful(ctx context.Context, grace time.Duration, f func() error) (over bool, bound func(d time.Duration) (context.Context, context.CancelFunc), err error) {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err = <-done:
		if ctx.Err() == nil {
			return false, func(d time.Duration) (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), d)
			}, err
		}
		return false, boundBy(time.Now().Add(grace)), err
	case <-ctx.Done():
	}
	bound = boundBy(time.Now().Add(grace))
	select {
	case err = <-done:
		return false, bound, err
	case <-time.After(grace):
		return true, bound, nil
	}
}

// boundBy returns a context maker for the steps left before deadline: each gets at
// most d, and none runs past deadline.
func boundBy(deadline time.Time) func(d time.Duration) (context.Context, context.CancelFunc) {
	return func(d time.Duration) (context.Context, context.CancelFunc) {
		if at := time.Now().Add(d); at.Before(deadline) {
			return context.WithDeadline(context.Background(), at)
		}
		return context.WithDeadline(context.Background(), deadline)
	}
}
