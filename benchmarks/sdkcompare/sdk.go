package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"time"

	"github.com/babelqueue-go/babelqueue"
	_ "github.com/babelqueue-go/babelqueue/transport/amqp"
	_ "github.com/babelqueue-go/babelqueue/transport/artemis"
	_ "github.com/babelqueue-go/babelqueue/transport/kafka"
	_ "github.com/babelqueue-go/babelqueue/transport/pulsar"
	_ "github.com/babelqueue-go/babelqueue/transport/redis"
	_ "github.com/babelqueue-go/babelqueue/transport/sqs"
)

const urn = "urn:babel:bench:sdk"

// errFailing is the error of the failing handlers of a half-failing run.
var errFailing = errors.New("sdkcompare: this handler fails")

type benchData struct {
	N  int   `json:"n"`
	At int64 `json:"at,omitempty"`
}

// goSDK runs a job through the Go SDK: App.Publish, App.PublishBatch or App.Run.
func goSDK(ctx context.Context, j job) (result, error) {
	raw := j.URL
	if j.Broker == "kafka" && j.Op == "consume" {
		u, err := url.Parse(raw)
		if err != nil {
			return result{}, err
		}
		q := u.Query()
		q.Set("group", j.Group)
		u.RawQuery = q.Encode()
		raw = u.String()
	}
	opts := []babelqueue.Option{babelqueue.WithQueue(j.Queue), babelqueue.WithConcurrency(j.Workers),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	if j.Prefetch > 0 {
		opts = append(opts, babelqueue.WithPrefetch(j.Prefetch))
	}
	if j.Fail {
		opts = append(opts, babelqueue.WithMaxAttempts(3), babelqueue.WithDeadLetter(true))
	}
	app, err := babelqueue.Open(ctx, raw, opts...)
	if err != nil {
		return result{}, err
	}
	defer app.Close(context.WithoutCancel(ctx))
	switch j.Op {
	case "publish":
		// A transport that connects on first use does so inside the clock, as the
		// Python SDK does; the raw clients connect before it starts.
		res, err := publishAll(j, func(_, from, to int, at stamp) error {
			for i := from; i < to; i++ {
				if _, err := app.Publish(ctx, urn, benchData{N: i, At: at(i)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return res, err
		}
		return res, flushKafka(ctx, app, &res)
	case "batch":
		res, err := publishAll(j, func(_, from, to int, _ stamp) error {
			entries := make([]babelqueue.BatchEntry, 0, 100)
			for i := from; i < to; i += 100 {
				entries = entries[:0]
				for k := i; k < min(i+100, to); k++ {
					entries = append(entries, babelqueue.BatchEntry{URN: urn, Data: benchData{N: k}})
				}
				if _, err := app.PublishBatch(ctx, entries); err != nil {
					return err
				}
			}
			return nil
		})
		return res, err
	case "consume":
		ready()
		rec := newRecorderFor(j)
		babelqueue.Handle(app, urn, func(_ context.Context, d benchData, _ *babelqueue.Message) error {
			rec.add(d.N, d.At)
			if j.Fail && d.N%2 == 1 {
				return errFailing
			}
			return nil
		})
		runCtx, stop := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- app.Run(runCtx) }()
		rec.waitIdle(ctx, j.Idle)
		stop()
		if err := <-errc; err != nil {
			return result{}, err
		}
		return rec.result(), nil
	}
	return result{}, fmt.Errorf("go: unknown op %q", j.Op)
}

// flushKafka waits for a Kafka transport's fire-and-forget publishes to be delivered
// (the SDK's Publish on Kafka confirms nothing by itself) and counts the wait in.
func flushKafka(ctx context.Context, app *babelqueue.App, res *result) error {
	f, ok := app.Transport().(interface{ Flush(context.Context) error })
	if !ok {
		return nil
	}
	cpu0 := processCPU()
	if err := f.Flush(ctx); err != nil {
		return err
	}
	res.Last = time.Now().UnixNano()
	res.CPU += processCPU() - cpu0
	return nil
}
