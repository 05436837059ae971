package babelqueue_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// optsRecorder is a memory broker that remembers what the runtime asked of Consume.
type optsRecorder struct {
	*memory.Transport
	got chan transport.ConsumeOptions
}

func (r optsRecorder) Consume(ctx context.Context, queue string, o transport.ConsumeOptions) (transport.Consumer, error) {
	r.got <- o
	return r.Transport.Consume(ctx, queue, o)
}

func TestWithPrefetch(t *testing.T) {
	for _, c := range []struct {
		name              string
		opts              []babelqueue.Option
		wantPrefetch      int
		wantInvalidOption bool
	}{
		{"default: the concurrency", []babelqueue.Option{babelqueue.WithConcurrency(3)}, 3, false},
		{"larger", []babelqueue.Option{babelqueue.WithConcurrency(2), babelqueue.WithPrefetch(16)}, 16, false},
		{"below the concurrency: raised", []babelqueue.Option{babelqueue.WithConcurrency(4), babelqueue.WithPrefetch(2)}, 4, false},
		{"zero: invalid", []babelqueue.Option{babelqueue.WithPrefetch(0)}, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := optsRecorder{memory.New(), make(chan transport.ConsumeOptions, 1)}
			app, err := babelqueue.New(tr, append(c.opts, babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))...)
			if c.wantInvalidOption {
				if err == nil {
					t.Fatal("New accepted a prefetch of 0")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- app.Run(ctx) }()
			o := <-tr.got
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if o.Prefetch != c.wantPrefetch {
				t.Fatalf("Consume asked for prefetch %d, want %d", o.Prefetch, c.wantPrefetch)
			}
		})
	}
}
