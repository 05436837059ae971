package driverkit

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the wait after failures in a row: Min after the first, doubling with each
// further one up to Max, each spread by ±Jitter (a fraction: 0.2 is ±20 %). Drivers use
// it for their clients' retries and their own retry loops, so that every loop that
// waits out a broker backs off the same way. The zero Jitter waits exactly.
type Backoff struct {
	Min, Max time.Duration
	Jitter   float64
}

// Delay returns the wait after the n-th failure in a row (n below 1 counts as 1).
func (b Backoff) Delay(n int) time.Duration {
	d := max(b.Min, 0)
	for i := 1; i < n && d > 0 && d < b.Max; i++ {
		d *= 2 // at most 63 doublings: d stops once it reaches Max
	}
	d = min(d, b.Max)
	if b.Jitter > 0 {
		d = time.Duration(float64(d) * (1 - b.Jitter + 2*b.Jitter*rand.Float64()))
	}
	return d
}

// Wait waits out Delay(n). It returns nil, or ctx.Err() when ctx ends first.
func (b Backoff) Wait(ctx context.Context, n int) error { return Sleep(ctx, b.Delay(n)) }

// Sleep waits d. It returns nil, or ctx.Err() when ctx ends first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Retry calls fn until it returns nil or an error retry does not accept, waiting out the
// backoff between the calls, and returns fn's last error. When ctx ends during a wait it
// returns fn's last error too (its cause is what the caller needs to know).
func (b Backoff) Retry(ctx context.Context, retry func(error) bool, fn func() error) error {
	for n := 1; ; n++ {
		err := fn()
		if err == nil || !retry(err) {
			return err
		}
		if b.Wait(ctx, n) != nil {
			return err
		}
	}
}
