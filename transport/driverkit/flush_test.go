package driverkit_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// RunCoalesced flushes once for the signals that came while a flush ran or paused, tries
// a failed flush again after its backoff until it succeeds (logging the failure and the
// recovery), cuts its pause short when urgent fires, and returns when ctx ends.
func TestRunCoalesced(t *testing.T) {
	var logs transporttest.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	sig, urgent := make(chan struct{}, 1), make(chan struct{}, 1)
	var calls, failFirst atomic.Int32
	ran := make(chan time.Time, 100)
	flush := func(context.Context) error {
		calls.Add(1)
		ran <- time.Now()
		if failFirst.Add(-1) >= 0 {
			return errors.New("coordinator gone")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		driverkit.RunCoalesced(ctx, sig, urgent, 200*time.Millisecond,
			driverkit.Backoff{Min: time.Millisecond, Max: 4 * time.Millisecond}, log, "test: flush", flush)
		close(done)
	}()
	wait := func() time.Time {
		t.Helper()
		select {
		case at := <-ran:
			return at
		case <-time.After(5 * time.Second):
			t.Fatal("no flush")
			return time.Time{}
		}
	}

	sig <- struct{}{}
	first := wait()
	// Signals during the pause coalesce into one flush after it.
	for range 5 {
		select {
		case sig <- struct{}{}:
		default:
		}
	}
	if d := wait().Sub(first); d < 200*time.Millisecond {
		t.Errorf("the second flush came %s after the first, within its pause", d)
	}
	select {
	case <-ran:
		t.Fatal("five signals made more than one flush")
	case <-time.After(300 * time.Millisecond):
	}

	// urgent ends the pause; failures are retried until a flush succeeds.
	failFirst.Store(3)
	urgent <- struct{}{}
	sig <- struct{}{}
	for range 4 {
		wait()
	}
	if n := calls.Load(); n != 6 {
		t.Errorf("%d flushes, want 6 (1, 1, then 3 failures and a success)", n)
	}
	// The recovery is logged once the flush returned.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "test: flush succeeds again") && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if out := logs.String(); !strings.Contains(out, "test: flush failed; retrying after a backoff") || !strings.Contains(out, "test: flush succeeds again") {
		t.Errorf("logs do not tell the failures and the recovery:\n%s", out)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("RunCoalesced did not return once its context ended")
	}
}
