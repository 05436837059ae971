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
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

func version(w io.Writer, args []string) error {
	o := newOut("version", w, w)
	fs := o.flags()
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.json {
		return o.emit(map[string]any{"version": babelqueue.Version, "schema_version": envelope.SchemaVersion, "lang": envelope.Lang, "schemes": transport.Schemes()})
	}
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

// urlQueueArg is urlArg for a command that works on one queue: URL#queue names it, as
// -queue does (see urlqueue.go).
func urlQueueArg(fs *flag.FlagSet, queue *string) (string, error) {
	raw, err := urlArg(fs)
	if err != nil {
		return "", err
	}
	u, frag, err := oneQueue(raw)
	if err != nil {
		return "", err
	}
	return u, queueFromURL(fs, "queue", queue, frag)
}

func publish(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOut("publish", stdout, stderr)
	fs := o.flags()
	queue := fs.String("queue", "default", "queue to publish to (or URL#queue)")
	urn := fs.String("urn", "", "the message URN (required), e.g. urn:babel:orders:created")
	data := fs.String("data", "{}", "the data object, as JSON")
	key := fs.String("key", "", "record key (Kafka, Pulsar, SQS FIFO group); empty for none")
	trace := fs.String("trace", "", "continue this trace_id instead of minting one")
	headers := headerFlag{}
	fs.Var(headers, "header", "out-of-band header name=value (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := urlQueueArg(fs, queue)
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
	if o.json {
		return o.emit(map[string]string{"urn": *urn, "queue": *queue, "id": id})
	}
	fmt.Fprintf(stdout, "published %s to %s (meta.id %s)\n", *urn, *queue, id)
	return nil
}

func consume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOut("consume", stdout, stderr)
	fs := o.flags()
	queue := fs.String("queue", "default", "queue to read (or URL#queue)")
	count := fs.Int("n", 0, "stop after this many messages (0: until interrupted or idle)")
	idle := fs.Duration("idle", 0, "stop once no message came for this long (0: wait forever)")
	keep := fs.Bool("keep", false, "give each message back to the broker instead of acknowledging it (stops after one pass of -n)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := urlQueueArg(fs, queue)
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
		if o.json {
			e := dlq.Read(d)
			v := view(e, n+1)
			if e.Envelope != nil {
				v.Data = e.Envelope.Data
			}
			if err := o.emit(v); err != nil {
				return err
			}
		} else {
			printDelivery(stdout, d)
		}
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
