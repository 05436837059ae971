package artemis

import (
	"context"
	"errors"
	"time"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// DefaultPublishWait is how long, by default, Publish waits for a connection to Artemis
// it cannot make ([WithPublishWait]).
const DefaultPublishWait = 30 * time.Second

// WithPublishWait bounds how long Publish waits for a connection to Artemis it cannot
// make (the URL's publish_wait; default [DefaultPublishWait]; zero fails at once;
// PublishConfirmed and settle writes do not wait). A publish whose reconnection failed
// (nothing was sent) tries again, after the transport's reconnection backoff, within
// its context and this bound, then fails with the cause: past the bound with an error
// matching context.DeadlineExceeded, and when its context ends first with the
// context's error; both wrap the last reconnection error. A negative d is an error
// matching babelqueue.ErrInvalidOption.
func WithPublishWait(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.bad.Invalid("WithPublishWait", "want zero (no wait) or a positive duration, got %s", d)
			return
		}
		o.publishWait = d
	}
}

// dialError is a reconnection that failed: nothing was sent on it.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// unsent reports whether err is a reconnection that failed.
func unsent(err error) bool {
	var de *dialError
	return errors.As(err, &de)
}

// rideOut makes write, and again while it reaches nothing (unsent), within ctx and the
// publish wait ([WithPublishWait]): driverkit.RideOut, 50 ms doubling to 1 s between.
func (t *Transport) rideOut(ctx context.Context, write func(ctx context.Context) error) error {
	return driverkit.RideOut(ctx, "artemis", t.opts.publishWait, driverkit.Backoff{Min: 50 * time.Millisecond, Max: time.Second}, unsent, write)
}
