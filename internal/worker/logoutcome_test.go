package worker

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
)

// TestSettlementLogLevels pins the level of each settlement's log line: what an
// operator sees at the default level Info is the unusual (a poison retry, a hand-off,
// a rewind) and the terminal (a drop, a dead letter); the policy working (a success, a
// retry, a release) is Debug.
func TestSettlementLogLevels(t *testing.T) {
	env, err := envelope.Make("urn:babel:orders:created", map[string]any{"order_id": 1})
	if err != nil {
		t.Fatal(err)
	}
	x := delivery[struct{}]{Delivery: Delivery{D: &transport.Delivery{Queue: "orders"}, Env: env, Route: env.Job,
		Facts: settle.Facts{Kind: settle.Failed, Attempts: 1}, Cause: errors.New("payment service refused")}}
	for _, tc := range []struct {
		action settle.Action
		level  string // "" when nothing is logged at Info
	}{
		{settle.ActAck, ""},
		{settle.ActRetry, ""},
		{settle.ActRelease, ""},
		{settle.ActPoisonRetry, "INFO"},
		{settle.ActHandOff, "INFO"},
		{settle.ActRewind, "INFO"},
		{settle.ActDrop, "WARN"},
		{settle.ActDeadLetter, "WARN"},
		{settle.ActPoisonDeadLetter, "WARN"},
		{settle.ActRawDeadLetter, "WARN"},
	} {
		t.Run(tc.action.String(), func(t *testing.T) {
			var info, debug bytes.Buffer
			for _, out := range []struct {
				buf   *bytes.Buffer
				level slog.Level
			}{{&info, slog.LevelInfo}, {&debug, slog.LevelDebug}} {
				p := New[struct{}](Config{Queue: "orders", DeadLetterQueue: "orders.dlq",
					Log: slog.New(slog.NewTextHandler(out.buf, &slog.HandlerOptions{Level: out.level}))}, nil, nil, Observing{})
				p.logOutcome(&x, settle.Decision{Action: tc.action, Attempts: 2})
			}
			if tc.level == "" {
				if info.Len() != 0 {
					t.Errorf("logged at Info: %s", info.String())
				}
				if !strings.Contains(debug.String(), "level=DEBUG") || !strings.Contains(debug.String(), "queue=orders") {
					t.Errorf("at Debug the line is %q, want a DEBUG line naming the queue", debug.String())
				}
				return
			}
			line := info.String()
			if !strings.Contains(line, "level="+tc.level) || !strings.Contains(line, "action="+tc.action.String()) ||
				!strings.Contains(line, `error="payment service refused"`) {
				t.Errorf("at Info the line is %q, want level=%s with its action and error", line, tc.level)
			}
		})
	}
}
