package babelqueue_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// A settle write the broker refuses for its size is as long on every redelivery:
// rewinding it would loop for ever (issue 22: no input may make the runtime rewind the
// same delivery without bound). The route settle.Decide returns takes over on the first
// delivery: the received bytes to the DLQ (they fit: the broker delivered them), or,
// with the DLQ off or when even those are refused, a drop that is logged. One row per
// route; the first two are the retry one byte over the limit (attempts 9 → 10).
func TestSettleWriteOverTheSizeLimitIsNotRewound(t *testing.T) {
	pad := strings.Repeat("x", 40)
	body := `{"job":"urn:babel:orders:created","trace_id":"t","data":{"pad":"` + pad + `"},"meta":{"schema_version":1},"attempts":9}`
	atMax := strings.Replace(body, `"attempts":9`, `"attempts":2`, 1)
	poison := `{"trace_id":"t","data":{"pad":"` + pad + `"},"attempts":0}`
	kafka := transport.Capabilities{Delay: true, PoisonNeedsRetryTiers: true, SchemaGate: true, Attempts: transport.AttemptsHeaderAuthoritative}
	for _, tc := range []struct {
		name    string
		body    string
		limit   int // the broker's size limit; the body itself was stored without a check
		caps    transport.Capabilities
		stored  memory.Stored
		dlq     bool
		max     int    // max_attempts
		handler bool   // a failing handler runs once
		settled string // the settlements the observer saw, in turn
		rawDLQ  bool   // the DLQ holds the received bytes once; otherwise nothing
	}{
		{"retry, DLQ on: the received bytes dead-lettered", body, len(body), transport.Capabilities{}, memory.Stored{}, true, 20, true,
			"failed/retry failed/raw_dead_letter", true},
		{"retry, DLQ off: dropped", body, len(body), transport.Capabilities{}, memory.Stored{}, false, 20, true,
			"failed/retry failed/drop", false},
		{"retry, DLQ on, the received bytes over the limit too: dropped", body, len(body) - 1, transport.Capabilities{}, memory.Stored{}, true, 20, true,
			"failed/retry failed/raw_dead_letter failed/drop", false},
		{"dead letter, DLQ on: the received bytes dead-lettered", atMax, len(atMax), transport.Capabilities{}, memory.Stored{}, true, 3, true,
			"failed/dead_letter failed/raw_dead_letter", true},
		{"poison dead letter, DLQ on: the received bytes dead-lettered", poison, len(poison), transport.Capabilities{}, memory.Stored{}, true, 3, false,
			"poison/poison_dead_letter poison/raw_dead_letter", true},
		{"gate rejection, DLQ on, the received bytes over the limit: dropped, not written again", body, len(body) - 1, kafka, memory.Stored{SchemaVersion: "2"}, true, 3, false,
			"schema_rejected/raw_dead_letter schema_rejected/drop", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := memory.New(memory.WithMaxMessageSize(tc.limit), memory.WithCapabilities(tc.caps))
			logs := &transporttest.LogBuffer{}
			rec := transporttest.NewRecorder()
			a, err := babelqueue.New(tr, babelqueue.WithQueue("orders"), babelqueue.WithMaxAttempts(tc.max),
				babelqueue.WithDeadLetter(tc.dlq), babelqueue.WithObserver(rec), babelqueue.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(context.Background())
			var calls atomic.Int32
			a.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
				calls.Add(1)
				return errors.New("payment gateway timeout")
			})
			tc.stored.Body = []byte(tc.body)
			tr.Inject("orders", tc.stored)
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			steps := strings.Count(tc.settled, " ") + 1
			rec.WaitSettled(t, steps, 10*time.Second) // the refused write, then the fallbacks
			time.Sleep(300 * time.Millisecond)        // a rewind loop would handle it again meanwhile
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if want := int32(boolInt(tc.handler)); calls.Load() != want {
				t.Fatalf("the handler ran %d times, want %d: the delivery was rewound after its write was refused for its size", calls.Load(), want)
			}
			if got := actions(rec.SettledEvents()); got != tc.settled {
				t.Errorf("settlements %q, want %q", got, tc.settled)
			}
			dead := tr.Messages("orders.dlq")
			switch {
			case tc.rawDLQ && (len(dead) != 1 || string(dead[0].Body) != tc.body):
				t.Fatalf("DLQ holds %d messages, want the received bytes once", len(dead))
			case !tc.rawDLQ && len(dead) != 0:
				t.Fatalf("the DLQ holds %d messages, want none", len(dead))
			}
			if n := len(tr.Messages("orders")) + tr.InFlight("orders"); n != 0 {
				t.Fatalf("%d messages left on the work queue", n)
			}
			if !strings.Contains(logs.String(), "over the broker's limit") {
				t.Fatalf("the size refusal was not logged with its cause:\n%s", logs.String())
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
