package driverkit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

var errGone = errors.New("connection refused")

func gone(err error) bool { return errors.Is(err, errGone) }

func TestRideOut(t *testing.T) {
	b := driverkit.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}
	t.Run("back before the wait ends", func(t *testing.T) {
		calls := 0
		err := driverkit.RideOut(context.Background(), "test", time.Second, b, gone, func(context.Context) error {
			if calls++; calls < 4 {
				return errGone
			}
			return nil
		})
		if err != nil || calls != 4 {
			t.Fatalf("RideOut = %v after %d writes, want nil after 4", err, calls)
		}
	})
	t.Run("an answer stands", func(t *testing.T) {
		refused := errors.New("NOPERM")
		calls := 0
		err := driverkit.RideOut(context.Background(), "test", time.Second, b, gone, func(context.Context) error {
			if calls++; calls == 1 {
				return errGone
			}
			return refused
		})
		if !errors.Is(err, refused) || calls != 2 {
			t.Fatalf("RideOut = %v after %d writes, want the refusal after 2", err, calls)
		}
	})
	t.Run("past the wait", func(t *testing.T) {
		err := driverkit.RideOut(context.Background(), "test", 30*time.Millisecond, b, gone, func(context.Context) error { return errGone })
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errGone) || !strings.HasPrefix(err.Error(), "test: publish:") {
			t.Fatalf("RideOut = %v, want DeadlineExceeded wrapping the last error, named", err)
		}
	})
	t.Run("the caller's context ends first", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		err := driverkit.RideOut(ctx, "test", time.Minute, b, gone, func(context.Context) error { return errGone })
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errGone) {
			t.Fatalf("RideOut = %v, want the context's error wrapping the last error", err)
		}
	})
	t.Run("no wait", func(t *testing.T) {
		calls := 0
		err := driverkit.RideOut(context.Background(), "test", 0, b, gone, func(context.Context) error { calls++; return errGone })
		if !errors.Is(err, errGone) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "publish_wait") || calls != 1 {
			t.Fatalf("RideOut = %v after %d writes, want the error after 1, past publish_wait", err, calls)
		}
	})
}
