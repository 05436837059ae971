// Package tour is the BabelQueue demo: the main job on the embedded default broker,
// memory://, with no broker to install. It runs behind both "make demo"
// (examples/demo) and "babelqueue demo" (cmd/babelqueue), and imports nothing but
// the standard library and this module, so running it compiles no broker client.
package tour

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// Run runs a producer and two workers on one in-process broker and prints how each
// message was settled to stdout. args are the demo's flags (-v prints the runtime's
// log).
func Run(ctx context.Context, stdout io.Writer, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stdout)
	verbose := fs.Bool("v", false, "print the runtime's log")
	if err := fs.Parse(args); err != nil {
		return err
	}
	level := slog.LevelError + 1
	if *verbose {
		level = slog.LevelDebug
	}
	broker := memory.New()
	app, err := babelqueue.New(broker,
		babelqueue.WithQueue("orders"),
		babelqueue.WithConcurrency(2),
		babelqueue.WithMaxAttempts(3),
		babelqueue.WithDeadLetter(true),
		babelqueue.WithRetryTiers(20*time.Millisecond, 50*time.Millisecond),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: level}))),
	)
	if err != nil {
		return err
	}
	defer closeApp(app)

	type order struct {
		OrderID int `json:"order_id"`
	}
	var (
		mu    sync.Mutex
		lines []string
		tries = map[int]int{}
		done  = make(chan struct{}, 8)
	)
	note := func(format string, a ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	babelqueue.Handle(app, "urn:babel:orders:created", func(_ context.Context, o order, m *babelqueue.Message) error {
		mu.Lock()
		tries[o.OrderID]++
		mu.Unlock()
		switch o.OrderID {
		case 1042:
			note("handled   order %d on its first delivery (attempts=%d)", o.OrderID, m.Attempts)
			done <- struct{}{}
			return nil
		case 1043:
			if m.Attempts == 0 {
				note("failed    order %d once (attempts=%d): the runtime re-publishes it with attempts+1", o.OrderID, m.Attempts)
				return errors.New("inventory service busy")
			}
			note("handled   order %d on retry (attempts=%d)", o.OrderID, m.Attempts)
			done <- struct{}{}
			return nil
		default:
			note("failed    order %d (attempts=%d)", o.OrderID, m.Attempts)
			return fmt.Errorf("card declined for order %d", o.OrderID)
		}
	})

	fmt.Fprintln(stdout, "BabelQueue demo on memory:// - queue \"orders\", 2 workers, max_attempts 3, dead-lettering on, retry tiers 20ms/50ms")
	for _, id := range []int{1042, 1043, 1044} {
		if _, err := app.Publish(ctx, "urn:babel:orders:created", order{OrderID: id}); err != nil {
			return err
		}
	}
	// A body from a misbehaving producer: not an envelope at all.
	if err := broker.Publish(ctx, &transport.Message{Queue: "orders", Body: []byte(`{"order_id":1045,"note":"no URN here"}`)}); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- app.Run(runCtx) }()

	deadline := time.After(10 * time.Second)
	for handled := 0; handled < 2 || len(broker.Messages("orders.dlq")) < 2; {
		select {
		case <-done:
			handled++
		case <-deadline:
			cancel()
			<-errc
			return errors.New("demo did not settle within 10s")
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-errc; err != nil {
		return err
	}
	mu.Lock()
	for _, l := range lines {
		fmt.Fprintln(stdout, "  "+l)
	}
	mu.Unlock()
	fmt.Fprintln(stdout, "\nDead-letter queue \"orders.dlq\":")
	for _, m := range broker.Messages("orders.dlq") {
		var w struct {
			Job        string `json:"job"`
			Raw        string `json:"raw"`
			DeadLetter struct {
				Reason   string  `json:"reason"`
				Error    *string `json:"error"`
				Attempts int     `json:"attempts"`
			} `json:"dead_letter"`
		}
		_ = json.Unmarshal(m.Body, &w)
		what := w.Job
		if what == "" {
			what = "(no URN: the original bytes are kept beside the block)"
		}
		msg := ""
		if w.DeadLetter.Error != nil {
			msg = *w.DeadLetter.Error
		}
		fmt.Fprintf(stdout, "  reason=%-7s attempts=%d %s\n    error: %s\n    body:  %s\n", w.DeadLetter.Reason, w.DeadLetter.Attempts, what, msg, m.Body)
	}
	left := len(broker.Messages("orders")) + broker.InFlight("orders")
	reasons := map[string]int{}
	for _, m := range broker.Messages("orders.dlq") {
		var w struct {
			DeadLetter struct {
				Reason string `json:"reason"`
			} `json:"dead_letter"`
		}
		_ = json.Unmarshal(m.Body, &w)
		reasons[w.DeadLetter.Reason]++
	}
	mu.Lock()
	retried := 0
	for _, n := range tries {
		if n > 1 {
			retried++
		}
	}
	mu.Unlock()
	fmt.Fprintf(stdout, "\nSummary: %d handled, %d retried, %d dead-lettered as failed, %d poison dead-lettered at once; %d left on the queue.\n",
		2, retried, reasons["failed"], reasons["poison"], left)
	return nil
}

func closeApp(a *babelqueue.App) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = a.Close(ctx)
}
