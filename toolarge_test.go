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

// A retry whose re-published body is one byte over the broker's limit (attempts 9 → 10)
// is refused for its size on every delivery. Rewinding it would loop for ever (issue
// 22: no input may make the runtime rewind the same delivery without bound): it is
// dead-lettered as received, or dropped and logged with the DLQ off, on its first
// delivery.
func TestSettleWriteOverTheSizeLimitIsNotRewound(t *testing.T) {
	body := `{"job":"urn:babel:orders:created","trace_id":"t","data":{"pad":"` + strings.Repeat("x", 40) + `"},"meta":{"schema_version":1},"attempts":9}`
	for _, tc := range []struct {
		name string
		dlq  bool
	}{{"DLQ on: the received bytes dead-lettered", true}, {"DLQ off: dropped", false}} {
		t.Run(tc.name, func(t *testing.T) {
			tr := memory.New(memory.WithMaxMessageSize(len(body)))
			logs := &transporttest.LogBuffer{}
			rec := transporttest.NewRecorder()
			a, err := babelqueue.New(tr, babelqueue.WithQueue("orders"), babelqueue.WithMaxAttempts(20),
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
			if err := tr.Publish(context.Background(), &transport.Message{Queue: "orders", Body: []byte(body)}); err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			rec.WaitSettled(t, 2, 10*time.Second) // the refused retry, then the fallback
			time.Sleep(300 * time.Millisecond)    // a rewind loop would handle it again meanwhile
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("the handler ran %d times: the delivery was rewound after its retry was refused for its size", n)
			}
			dead := tr.Messages("orders.dlq")
			switch {
			case tc.dlq && (len(dead) != 1 || string(dead[0].Body) != body):
				t.Fatalf("DLQ holds %d messages, want the received bytes once", len(dead))
			case !tc.dlq && len(dead) != 0:
				t.Fatalf("DLQ off, but it holds %d messages", len(dead))
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
