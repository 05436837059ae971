package main

import (
	"context"
	"errors"
	"testing"
	"time"
)

// graceful waits for what stops in time, gives up on what does not once the grace is
// over, and bounds what comes after by the grace.
func TestGraceful(t *testing.T) {
	errDone := errors.New("done")
	t.Run("returns before the interrupt", func(t *testing.T) {
		over, bound, err := graceful(context.Background(), time.Hour, func() error { return errDone })
		if over || !errors.Is(err, errDone) {
			t.Fatalf("over %v, err %v", over, err)
		}
		ctx, cancel := bound(time.Minute)
		defer cancel()
		if d, _ := ctx.Deadline(); time.Until(d) < 50*time.Second {
			t.Errorf("a step after it gets %s, want its own minute", time.Until(d))
		}
	})
	t.Run("stops within the grace", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		over, bound, err := graceful(ctx, time.Minute, func() error { <-ctx.Done(); time.Sleep(50 * time.Millisecond); return nil })
		if over || err != nil {
			t.Fatalf("over %v, err %v", over, err)
		}
		bctx, bcancel := bound(time.Hour)
		defer bcancel()
		if d, _ := bctx.Deadline(); time.Until(d) > time.Minute {
			t.Errorf("a step after the interrupt gets %s, past the grace", time.Until(d))
		}
	})
	t.Run("does not stop", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		never := make(chan struct{})
		defer close(never)
		time.AfterFunc(20*time.Millisecond, cancel)
		start := time.Now()
		over, _, err := graceful(ctx, 100*time.Millisecond, func() error { <-never; return nil })
		if !over || err != nil {
			t.Fatalf("over %v, err %v", over, err)
		}
		if took := time.Since(start); took < 100*time.Millisecond {
			t.Errorf("gave up after %s, before the grace", took)
		}
	})
}
