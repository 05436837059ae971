package amqp

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// A confirm that never comes ends with the confirm timeout, a cancelled context with
// its error, and the channel's reused timer carries nothing over from one wait to the
// next. No broker needed: a zero DeferredConfirmation is never done.
func TestWaitConfirmTimeoutAndReuse(t *testing.T) {
	s := defaultSettings()
	s.confirmTimeout = 20 * time.Millisecond
	tr := newTransport(s)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	pc := &pubChan{timer: timer}
	never := &amqp091.DeferredConfirmation{}
	waitConfirm := func(ctx context.Context, dc *amqp091.DeferredConfirmation) error {
		errs := [1]error{}
		tr.awaitConfirms(ctx, pc.timer, []sent{{dc: dc, key: retKey{key: "q"}}}, errs[:])
		return errs[0]
	}

	for range 2 {
		err := waitConfirm(context.Background(), never)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("no confirm: got %v, want context.DeadlineExceeded", err)
		}
	}

	// After a timeout, a wait cut short by its context reports the context's error, not
	// a stale tick of the reused timer.
	tr.s.confirmTimeout = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := waitConfirm(ctx, never); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: got %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := waitConfirm(ctx, never); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("context deadline: got %v, want context.DeadlineExceeded", err)
	}

	if err := waitConfirm(context.Background(), nil); err == nil {
		t.Fatal("nil confirmation: want an error")
	}
}
