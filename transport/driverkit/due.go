package driverkit

import (
	"context"
	"time"
)

// RunDue is the loop of a driver that delays messages itself (a broker without native
// delays, whose driver parks them and moves them back when due). It calls due for what
// is due now and when the next item falls due (the zero time: nothing waits), hands what
// is due to fire, and sleeps until the next is due, until wake signals (something new
// was parked), or, after fire reported a failure, for retry before it fires again.
// It returns when ctx ends.
func RunDue[T any](ctx context.Context, wake <-chan struct{}, retry time.Duration,
	due func(now time.Time) ([]T, time.Time), fire func([]T) bool) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var retryAt time.Time
	for {
		now := time.Now()
		items, next := due(now)
		if len(items) > 0 && !now.Before(retryAt) {
			if fire(items) {
				continue
			}
			retryAt = time.Now().Add(retry)
		}
		wait := time.Hour
		switch {
		case len(items) > 0:
			wait = time.Until(retryAt)
		case !next.IsZero():
			wait = time.Until(next)
		}
		timer.Reset(max(wait, 0))
		select {
		case <-timer.C:
		case <-wake: // Reset discards the pending expiry (Go 1.23 timers)
		case <-ctx.Done():
			return
		}
	}
}
