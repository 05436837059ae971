package transporttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// DrainBodies consumes queue on tr with the given prefetch, acknowledging every
// delivery, until none arrives for quiet (within two minutes), and counts the bodies.
func DrainBodies(t testing.TB, tr transport.Transport, queue string, prefetch int, quiet time.Duration) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := tr.Consume(ctx, queue, transport.ConsumeOptions{Prefetch: prefetch})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	got := map[string]int{}
	for {
		rctx, rcancel := context.WithTimeout(ctx, quiet)
		d, err := c.Receive(rctx)
		rcancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return got
		}
		if err != nil {
			t.Fatalf("drain %s: %v", queue, err)
		}
		got[string(d.Body)]++
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatalf("drain %s: ack: %v", queue, err)
		}
	}
}
