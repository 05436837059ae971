package driverkit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// retrier is the backoff of one consumer's failed receives, shared by its Receive
// calls: a failure while the backoff of an earlier one runs joins that wait instead of
// doubling it again, so several workers failing on one lost connection count once.
type retrier struct {
	cfg     *Config
	failing atomic.Bool // failures > 0: succeeded has something to reset

	mu       sync.Mutex
	failures int       // failed rounds in a row; guarded by mu
	until    time.Time // the end of the current backoff; guarded by mu
}

// wait counts err, the failure of a receive, and waits out the backoff. It returns nil
// to receive again, ctx.Err() when ctx ends and [transport.ErrClosed] when done closes.
// The cause is logged at the first failure of a run and at each doubling of their
// count.
func (r *retrier) wait(ctx context.Context, err error, done <-chan struct{}) error {
	r.mu.Lock()
	now := time.Now()
	if !now.Before(r.until) {
		r.failures++
		n := r.failures
		backoff := min(r.cfg.MinBackoff<<min(n-1, 20), r.cfg.MaxBackoff)
		r.until = now.Add(backoff)
		r.failing.Store(true)
		if n&(n-1) == 0 {
			r.cfg.Logger.Warn(r.cfg.Broker+": receive failed; retrying after a backoff",
				"queue", r.cfg.Queue, "failures", n, "backoff", backoff, "error", err)
		}
	}
	wait := time.Until(r.until)
	r.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return transport.ErrClosed
	}
}

// succeeded ends a run of failures, logging it.
func (r *retrier) succeeded() {
	if !r.failing.Load() {
		return // the common case
	}
	r.mu.Lock()
	n := r.failures
	r.failures = 0
	r.until = time.Time{}
	r.failing.Store(false)
	r.mu.Unlock()
	if n > 0 {
		r.cfg.Logger.Info(r.cfg.Broker+": receiving again", "queue", r.cfg.Queue, "failed_before", n)
	}
}
