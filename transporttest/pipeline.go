package transporttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
)

// RunPipelinedClose checks a driver whose Settle returns before its writes are
// confirmed (pipelined settle writes): closing a consumer, then its transport, waits
// for the settlements in flight. 200 messages, each acknowledged with a write to a
// second queue, end there exactly once, and none is left on the source queue. Were a
// delivery acknowledged before its write was confirmed, or given back while its write
// was in flight, a message would be missing or there twice.
//
// pipelined is the transport under test, with its settle writes pipelined; the kit
// closes it. direct, a [transport.ConfirmedPublisher] on the same broker, publishes
// the messages and reads the queues afterwards.
func RunPipelinedClose(t *testing.T, direct, pipelined transport.Transport) {
	t.Helper()
	const n = 200
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q, retry := UniqueName("bqtest-close"), UniqueName("bqtest-close-retry")
	msgs := make([]*transport.Message, n)
	for i := range n {
		msgs[i] = &transport.Message{Queue: q, Body: fmt.Appendf(nil, `{"n":%d}`, i)}
	}
	pub, ok := direct.(transport.ConfirmedPublisher)
	if !ok {
		t.Fatalf("%T does not publish confirmed", direct)
	}
	if err := pub.PublishConfirmed(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	c, err := pipelined.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 20})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		d := Receive(t, c, 30*time.Second)
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: retry, Body: d.Body}}}); err != nil {
			t.Fatalf("Settle: %v", err)
		}
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("consumer Close: %v", err)
	}
	if err := pipelined.Close(ctx); err != nil {
		t.Fatalf("transport Close: %v", err)
	}
	written := DrainBodies(t, direct, retry, 100, 3*time.Second)
	for i := range n {
		if b := fmt.Sprintf(`{"n":%d}`, i); written[b] != 1 {
			t.Errorf("%s is on %s %d times, want once", b, retry, written[b])
		}
	}
	if back := DrainBodies(t, direct, q, 100, 3*time.Second); len(back) != 0 {
		t.Errorf("%d messages were left on %s after Close: %v", len(back), q, back)
	}
}

// RunRuntimeShutdownWithPipelinedWrites checks that the runtime's shutdown waits for
// the pipelined dead-letter writes of pipelined (see [RunPipelinedClose]): every one of
// 200 messages whose handler always fails (max_attempts 1, dead-lettering on, eight
// workers) ends on the dead-letter queue exactly once, none is left on the source
// queue, and the handler ran once per message. The app is stopped as soon as the last
// message was handled, with the last writes still in flight. direct reads the queues
// afterwards; the kit does not close pipelined.
func RunRuntimeShutdownWithPipelinedWrites(t *testing.T, direct, pipelined transport.Transport) {
	t.Helper()
	const n = 200
	q := UniqueName("bqtest-shutdown")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := babelqueue.New(pipelined, babelqueue.WithQueue(q), babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		babelqueue.WithMaxAttempts(1), babelqueue.WithDeadLetter(true), babelqueue.WithConcurrency(8), babelqueue.WithPrefetch(40))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	all := make(chan struct{})
	a.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		if calls.Add(1) == n {
			close(all)
		}
		return errors.New("always fails")
	})
	entries := make([]babelqueue.BatchEntry, n)
	for i := range n {
		entries[i] = babelqueue.BatchEntry{URN: "urn:babel:orders:created", Data: map[string]int{"n": i}}
	}
	if _, err := a.PublishBatch(ctx, entries); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- a.Run(rctx) }()
	select {
	case <-all:
	case <-ctx.Done():
		t.Errorf("only %d of %d messages handled", calls.Load(), n)
	}
	stop()
	if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	dlq := a.DeadLetterQueue()
	dead := DrainBodies(t, direct, dlq, 100, 3*time.Second)
	total := 0
	for b, k := range dead {
		total += k
		if k != 1 {
			t.Errorf("%s is on %s %d times, want once", b, dlq, k)
		}
	}
	if total != n {
		t.Errorf("%s holds %d messages, want %d", dlq, total, n)
	}
	if back := DrainBodies(t, direct, q, 100, 3*time.Second); len(back) != 0 {
		t.Errorf("%d messages were left on %s after shutdown", len(back), q)
	}
	if int(calls.Load()) != n {
		t.Errorf("the handler ran %d times, want %d (once per message)", calls.Load(), n)
	}
}
