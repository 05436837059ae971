package driverkit

import (
	"context"
	"fmt"
	"time"
)

// RideOut makes a publish's write and, while it fails with an error that unsent says
// reached nothing (a connection that could not be made or ended before the write went
// out), makes it again after b's backoff, within ctx and wait: a
// publish that rides out a broker gone for a moment (issue 38). It returns nil once a
// write succeeds, at once an error unsent does not claim (the broker answered: its answer
// stands), and otherwise, past wait, an error matching context.DeadlineExceeded that
// names publish_wait, or when ctx ends first an error matching ctx's; both wrap the last
// write error and name broker. A wait of zero or less makes the write once.
func RideOut(ctx context.Context, broker string, wait time.Duration, b Backoff, unsent func(error) bool, write func(context.Context) error) error {
	last := write(ctx)
	if last == nil || !unsent(last) {
		return last
	}
	wctx, cancel := context.WithTimeout(ctx, max(wait, 0))
	defer cancel()
	for n := 1; b.Wait(wctx, n) == nil; n++ {
		err := write(wctx)
		switch {
		case err == nil:
			return nil
		case unsent(err):
			last = err
		case wctx.Err() == nil:
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: publish: %w while waiting for a connection; the broker's last error: %w", broker, err, last)
	}
	return fmt.Errorf("%s: publish: no connection within %s (publish_wait): %w; the broker's last error: %w",
		broker, wait, context.DeadlineExceeded, last)
}
