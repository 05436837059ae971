package driverkit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Confirmations end once: nil after every write is confirmed, the first failure mapped by
// fail, a timeout, or the end of Wait's context; a notify function gets the same result.
func TestConfirmations(t *testing.T) {
	refused := errors.New("refused")
	fail := func(i int, err error) error { return fmt.Errorf("write %d: %w", i, err) }
	long := time.Minute

	c := driverkit.NewConfirmations(3, long, fail, nil)
	for i := range 3 {
		go c.Report(i, nil)
	}
	if err := c.Wait(context.Background()); err != nil {
		t.Fatalf("all confirmed: %v", err)
	}

	c = driverkit.NewConfirmations(3, long, fail, nil)
	c.Report(0, nil)
	c.Report(2, refused)
	c.Report(1, nil)
	if err := c.Wait(context.Background()); !errors.Is(err, refused) || err.Error() != "write 2: refused" {
		t.Fatalf("one refused: %v, want write 2's failure", err)
	}

	c = driverkit.NewConfirmations(2, 10*time.Millisecond, fail, nil)
	c.Report(0, nil)
	if err := c.Wait(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("not all confirmed in time: %v, want the deadline", err)
	}

	c = driverkit.NewConfirmations(1, long, fail, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait's context ended: %v", err)
	}

	got := make(chan error, 2)
	c = driverkit.NewConfirmations(2, long, fail, func(err error) { got <- err })
	c.Report(1, refused)
	c.Report(0, nil) // after the end: ignored
	if err := <-got; !errors.Is(err, refused) {
		t.Fatalf("notified %v, want the refusal", err)
	}
	select {
	case err := <-got:
		t.Fatalf("notified twice (%v)", err)
	case <-time.After(20 * time.Millisecond):
	}
	c = driverkit.NewConfirmations(1, long, fail, func(err error) { got <- err })
	c.Report(0, nil)
	if err := <-got; err != nil {
		t.Fatalf("notified %v, want nil", err)
	}
}
