package worker

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
)

// BenchmarkLogOutcome is the settlement log line of a retried and of a dead-lettered
// delivery through a text handler at level Debug (a retry's line is Debug) that
// discards what it writes: what a failure storm costs in logging when its lines are on.
func BenchmarkLogOutcome(b *testing.B) {
	p := New[struct{}](Config{Queue: "default", DeadLetterQueue: "default.dlq",
		Log: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))}, nil, nil, Observing{})
	env, err := envelope.Make("urn:babel:orders:created", map[string]any{"order_id": 1})
	if err != nil {
		b.Fatal(err)
	}
	x := delivery[struct{}]{Delivery: Delivery{D: &transport.Delivery{Queue: "default"}, Env: env, Route: env.Job,
		Facts: settle.Facts{Kind: settle.Failed, Attempts: 1}, Cause: errors.New("payment service refused")}}
	for _, dec := range []settle.Decision{{Action: settle.ActRetry, Attempts: 2}, {Action: settle.ActDeadLetter, Attempts: 3, Reason: "failed"}} {
		b.Run(dec.Action.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.logOutcome(&x, dec)
			}
		})
	}
}
