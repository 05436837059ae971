package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

func version(w io.Writer) error {
	fmt.Fprintf(w, "babelqueue %s (envelope schema_version %d, lang %s)\nschemes: %s\n",
		babelqueue.Version, envelope.SchemaVersion, envelope.Lang, strings.Join(transport.Schemes(), ", "))
	return nil
}

// headerFlag collects repeated -header k=v flags.
type headerFlag map[string]string

func (h headerFlag) String() string { return fmt.Sprint(map[string]string(h)) }

func (h headerFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("header %q: want name=value", v)
	}
	h[k] = val
	return nil
}

func urlArg(fs *flag.FlagSet) (string, error) {
	if fs.NArg() != 1 {
		return "", usageError{fmt.Sprintf("want exactly one broker URL after the flags, got %d arguments", fs.NArg())}
	}
	return fs.Arg(0), nil
}

func publish(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	queue := fs.String("queue", "default", "queue to publish to")
	urn := fs.String("urn", "", "the message URN (required), e.g. urn:babel:orders:created")
	data := fs.String("data", "{}", "the data object, as JSON")
	key := fs.String("key", "", "record key (Kafka, Pulsar, SQS FIFO group); empty for none")
	trace := fs.String("trace", "", "continue this trace_id instead of minting one")
	headers := headerFlag{}
	fs.Var(headers, "header", "out-of-band header name=value (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := urlArg(fs)
	if err != nil {
		return err
	}
	if *urn == "" {
		return usageError{"-urn is required"}
	}
	var payload json.RawMessage
	if err := json.Unmarshal([]byte(*data), &payload); err != nil {
		return usageError{fmt.Sprintf("-data is not JSON: %v", err)}
	}
	app, err := babelqueue.Open(ctx, url, babelqueue.WithQueue(*queue), babelqueue.WithLogger(quietLogger(stderr)))
	if err != nil {
		return err
	}
	defer closeApp(app)
	opts := []babelqueue.PublishOption{}
	if *key != "" {
		opts = append(opts, babelqueue.WithKey([]byte(*key)))
	}
	if *trace != "" {
		opts = append(opts, babelqueue.ContinueTrace(*trace))
	}
	if len(headers) > 0 {
		opts = append(opts, babelqueue.WithHeaders(headers))
	}
	id, err := app.Publish(ctx, *urn, payload, opts...)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "published %s to %s (meta.id %s)\n", *urn, *queue, id)
	return nil
}

func consume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	queue := fs.String("queue", "default", "queue to read")
	count := fs.Int("n", 0, "stop after this many messages (0: until interrupted or idle)")
	idle := fs.Duration("idle", 0, "stop once no message came for this long (0: wait forever)")
	keep := fs.Bool("keep", false, "give each message back to the broker instead of acknowledging it (stops after one pass of -n)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := urlArg(fs)
	if err != nil {
		return err
	}
	tr, err := transport.Open(ctx, url)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tr.Close(cctx)
	}()
	if *keep && *count == 0 {
		return usageError{"-keep needs -n, or the same message would print forever"}
	}
	c, err := tr.Consume(ctx, *queue, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	for n := 0; *count == 0 || n < *count; n++ {
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if *idle > 0 {
			rctx, cancel = context.WithTimeout(ctx, *idle)
		}
		d, err := c.Receive(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
				return nil
			}
			return err
		}
		printDelivery(stdout, d)
		outcome := transport.Ack
		if *keep {
			outcome = transport.Rewind
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: outcome}); err != nil {
			return err
		}
	}
	return nil
}

func redrive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("redrive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	queue := fs.String("queue", "default", "the work queue whose dead-letter queue is redriven")
	dlq := fs.String("dead-letter-queue", "", "the dead-letter queue (default: the broker's name for it, e.g. <queue>.dlq)")
	max := fs.Int("n", 0, "move at most this many messages (0: all)")
	idle := fs.Duration("idle", 2*time.Second, "stop once the dead-letter queue stayed empty this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := urlArg(fs)
	if err != nil {
		return err
	}
	opts := []babelqueue.Option{babelqueue.WithQueue(*queue), babelqueue.WithLogger(quietLogger(stderr))}
	if *dlq != "" {
		opts = append(opts, babelqueue.WithDeadLetterQueue(*dlq))
	}
	app, err := babelqueue.Open(ctx, url, opts...)
	if err != nil {
		return err
	}
	defer closeApp(app)
	res, err := app.Redrive(ctx, *max, *idle)
	fmt.Fprintf(stdout, "redrove %d message(s) from %s; %d left there (not envelopes)\n", res.Moved, app.DeadLetterQueue(), res.Kept)
	return err
}

func printDelivery(w io.Writer, d *transport.Delivery) {
	verdict := "envelope"
	if env, err := envelope.Decode(d.Body); err != nil {
		verdict = "poison (" + err.Error() + ")"
	} else if err := env.Accepts(); err != nil {
		verdict = "not accepted (" + err.Error() + ")"
	} else {
		verdict = fmt.Sprintf("%s attempts=%d id=%s", env.Job, env.Attempts, env.Meta.ID)
	}
	fmt.Fprintf(w, "%% queue=%s %s", d.Queue, verdict)
	if d.Key != nil {
		fmt.Fprintf(w, " key=%q", d.Key)
	}
	if d.Redeliveries > 0 {
		fmt.Fprintf(w, " redeliveries=%d", d.Redeliveries)
	}
	if len(d.Headers) > 0 {
		keys := make([]string, 0, len(d.Headers))
		for k := range d.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, " %s=%q", k, d.Headers[k])
		}
	}
	fmt.Fprintf(w, "\n%s\n", d.Body)
}

func quietLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func closeApp(a *babelqueue.App) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = a.Close(ctx)
}

// demo runs a producer and two workers on one in-process broker and prints how each
// message was settled.
func demo(ctx context.Context, args []string, stdout io.Writer) error {
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
