package driverkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// The delay doubles from Min and stays at Max; jitter spreads each one by its fraction.
func TestBackoffDelay(t *testing.T) {
	exact := driverkit.Backoff{Min: 250 * time.Millisecond, Max: 2 * time.Second}
	for n, want := range map[int]time.Duration{0: 250 * time.Millisecond, 1: 250 * time.Millisecond,
		2: 500 * time.Millisecond, 4: 2 * time.Second, 40: 2 * time.Second, 1 << 40: 2 * time.Second} {
		if got := exact.Delay(n); got != want {
			t.Errorf("Delay(%d) = %s, want %s", n, got, want)
		}
	}
	// A long Min doubled many times never overflows into a short delay.
	if d := (driverkit.Backoff{Min: time.Hour, Max: 1 << 62}).Delay(100); d != 1<<62 {
		t.Errorf("Delay(100) of an hour doubling = %s, want the max", d)
	}
	jittered := driverkit.Backoff{Min: 250 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}
	want := 250 * time.Millisecond
	for n := 1; n <= 30; n++ {
		if d := jittered.Delay(n); d < want*8/10 || d > want*12/10 {
			t.Fatalf("after %d failures the delay is %s, want %s ±20%%", n, d, want)
		}
		want = min(2*want, 2*time.Second)
	}
}

// Retry calls again while retry accepts the error, stops at one it does not, and returns
// the last error when ctx ends during a wait.
func TestBackoffRetry(t *testing.T) {
	b := driverkit.Backoff{Min: time.Millisecond, Max: 4 * time.Millisecond}
	transient, fatal := errors.New("transient"), errors.New("fatal")
	isTransient := func(err error) bool { return errors.Is(err, transient) }
	calls := 0
	err := b.Retry(context.Background(), isTransient, func() error {
		if calls++; calls < 5 {
			return transient
		}
		return nil
	})
	if err != nil || calls != 5 {
		t.Fatalf("Retry = %v after %d calls, want nil after 5", err, calls)
	}
	calls = 0
	err = b.Retry(context.Background(), isTransient, func() error { calls++; return fatal })
	if !errors.Is(err, fatal) || calls != 1 {
		t.Fatalf("Retry of a fatal error = %v after %d calls, want it after 1", err, calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = b.Retry(ctx, isTransient, func() error { return transient })
	if !errors.Is(err, transient) || ctx.Err() == nil {
		t.Fatalf("Retry until ctx ends = %v (ctx %v), want the last error once ctx ended", err, ctx.Err())
	}
}

// TestSleep: Sleep waits its duration, and returns the context's error as soon as the
// context ends.
func TestSleep(t *testing.T) {
	began := time.Now()
	if err := driverkit.Sleep(context.Background(), 20*time.Millisecond); err != nil || time.Since(began) < 20*time.Millisecond {
		t.Errorf("Sleep(20ms) = %v after %s", err, time.Since(began))
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	began = time.Now()
	if err := driverkit.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(began) > time.Minute {
		t.Errorf("Sleep(1h) with a context cancelled after 10ms = %v after %s", err, time.Since(began))
	}
}
