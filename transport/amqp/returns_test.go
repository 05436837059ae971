package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
)

// newTestTracker is a returnTracker fed by the test instead of a channel.
func newTestTracker(t *testing.T) *returnTracker {
	r := &returnTracker{
		t:       newTransport(defaultSettings()),
		ch:      make(chan amqp091.Return, returnBuffer),
		syncs:   make(chan chan struct{}),
		done:    make(chan struct{}),
		pending: make(map[retKey]retState),
	}
	r.t.log = slog.New(slog.DiscardHandler)
	go r.run()
	t.Cleanup(func() { close(r.ch) })
	return r
}

// Returns are told apart by routing key and message id: a return fails only the
// publishes registered under its key, and two publishes under one key that cannot be
// told apart both fail (a duplicate at worst, never a loss). A key resolved clean
// carries nothing over to the next publish under it. No broker needed.
func TestReturnTrackerCorrelates(t *testing.T) {
	r := newTestTracker(t)
	a, b, c := retKey{"q", "id-a"}, retKey{"q", "id-b"}, retKey{"q.dlq", "id-a"}
	for _, k := range []retKey{a, b, c, a} {
		r.register(k)
	}
	r.ch <- amqp091.Return{RoutingKey: "q", MessageId: "id-a", ReplyCode: 312, ReplyText: "NO_ROUTE"}
	r.sync()
	if ret, code, text := r.resolve(a); !ret || code != 312 || text != "NO_ROUTE" {
		t.Errorf("first publish under the returned key: returned=%v %d %q, want true 312 NO_ROUTE", ret, code, text)
	}
	if ret, _, _ := r.resolve(a); !ret {
		t.Error("second publish under the returned key: not reported returned (it cannot be told apart)")
	}
	if ret, _, _ := r.resolve(b); ret {
		t.Error("another message id on the same queue reported returned")
	}
	if ret, _, _ := r.resolve(c); ret {
		t.Error("the same message id on another queue reported returned")
	}
	r.register(a)
	r.sync()
	if ret, _, _ := r.resolve(a); ret {
		t.Error("a publish registered after the returned ones were resolved inherited their return")
	}
	r.mu.Lock()
	n := len(r.pending)
	r.mu.Unlock()
	if n != 0 {
		t.Errorf("%d keys left pending after every publish was resolved", n)
	}
}

// The return channel is drained whether or not anyone waits: far more returns than its
// buffer, for publishes nobody checks, never block the sender (amqp091-go's reader,
// which gives up on a listener after 5 s and drops the return).
func TestReturnChannelAlwaysDrained(t *testing.T) {
	r := newTestTracker(t)
	guard := time.NewTimer(30 * time.Second) // a hang guard, not a timing assertion
	defer guard.Stop()
	for i := range 20 * returnBuffer {
		select {
		case r.ch <- amqp091.Return{RoutingKey: "gone", MessageId: fmt.Sprint(i)}:
		case <-guard.C:
			t.Fatalf("return %d blocked: the listener's channel is not drained", i)
		}
	}
	r.sync() // and a waiter still gets through
}

// A publish to a queue deleted while the transport runs fails with ErrUnroutable naming
// the queue (it was confirmed and dropped before), and the next publish declares the
// queue again and succeeds. In a confirmed batch the returned message fails at its index
// and the others are confirmed.
func TestPublishToDeletedQueue(t *testing.T) {
	ctx := ctxT(t)
	q, other := newQueue(t), newQueue(t)
	tr := openT(t)
	ch := rawChannel(t, rawConn(t))
	msg := func(q, id string) *transport.Message {
		return &transport.Message{Queue: q, Body: []byte(`{"n":"` + id + `"}`), Projection: transport.Projection{MessageID: id}}
	}
	if err := tr.Publish(ctx, msg(q, "1")); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	err := tr.Publish(ctx, msg(q, "2"))
	if !errors.Is(err, ErrUnroutable) || !strings.Contains(err.Error(), q) {
		t.Fatalf("publish to the deleted queue = %v, want ErrUnroutable naming %s", err, q)
	}
	if strings.Contains(err.Error(), "guest") {
		t.Fatalf("error carries credentials: %v", err)
	}
	if err := tr.Publish(ctx, msg(q, "2")); err != nil {
		t.Fatalf("publish after the return = %v, want the queue declared again", err)
	}
	if n := queueCount(t, ch, q); n != 1 {
		t.Fatalf("%s holds %d messages, want the one published after it was declared again", q, n)
	}

	// A batch: the deleted queue's message fails at its index, the rest are confirmed.
	if err := tr.Publish(ctx, msg(other, "o")); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	err = tr.PublishConfirmed(ctx, []*transport.Message{msg(other, "b0"), msg(q, "b1"), msg(other, "b2")})
	var be *transport.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 3 || be.Errs[0] != nil || !errors.Is(be.Errs[1], ErrUnroutable) || be.Errs[2] != nil {
		t.Fatalf("batch with a deleted queue = %v, want a BatchError with ErrUnroutable at index 1 only", err)
	}
	if err := tr.PublishConfirmed(ctx, []*transport.Message{msg(q, "b1")}); err != nil {
		t.Fatalf("batch after the return = %v", err)
	}
	if got := drain(t, ch, q); len(got) != 1 || got[0] != `{"n":"b1"}` {
		t.Fatalf("%s holds %q, want the batch's retried message", q, got)
	}
	if got := drain(t, ch, other); len(got) != 3 {
		t.Fatalf("%s holds %q, want o, b0 and b2", other, got)
	}
}

// With declare=false a publish to a queue that does not exist fails with ErrUnroutable
// instead of vanishing, every time (the transport never declares it).
func TestPublishWithoutDeclareToMissingQueue(t *testing.T) {
	ctx := ctxT(t)
	q := newQueue(t)
	tr := openT(t, WithoutDeclare())
	for range 2 {
		err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`)})
		if !errors.Is(err, ErrUnroutable) {
			t.Fatalf("publish to a missing queue with declare=false = %v, want ErrUnroutable", err)
		}
	}
	ch := rawChannel(t, rawConn(t))
	if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err == nil {
		t.Fatalf("%s exists: the transport declared it with declare=false", q)
	}
}

// A settle write to a queue deleted while the consumer runs is not acknowledged:
// awaited, Settle fails with a SettleWriteError wrapping ErrUnroutable; pipelined, the
// transport rewinds the delivery. Either way the delivery comes again, and settling it
// again declares the queue and lands the write once.
func TestSettleWriteToDeletedQueue(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "awaited"}[pipelined], func(t *testing.T) {
			ctx := ctxT(t)
			q, dlq := newQueue(t), newQueue(t)
			tr := openT(t, WithPipelinedSettles(pipelined))
			ch := rawChannel(t, rawConn(t))
			body := []byte(`{"job":"urn:babel:t:ret","trace_id":"t","data":{},"meta":{"id":"m1","schema_version":1},"attempts":0}`)
			if err := tr.Publish(ctx, &transport.Message{Queue: dlq, Body: []byte(`{}`)}); err != nil {
				t.Fatal(err) // dlq is now in the declare cache
			}
			if _, err := ch.QueueDelete(dlq, false, false, false); err != nil {
				t.Fatal(err)
			}
			if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body}); err != nil {
				t.Fatal(err)
			}
			c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			write := func(d *transport.Delivery) transport.Settlement {
				return transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{
					{Queue: dlq, Body: d.Body, Projection: transport.Projection{MessageID: "m1"}}}}
			}
			d := receive(t, c, 30*time.Second)
			err = c.Settle(ctx, d, write(d))
			if pipelined {
				if err != nil {
					t.Fatalf("pipelined Settle = %v, want nil (the return comes later)", err)
				}
			} else {
				var swe *transport.SettleWriteError
				if !errors.As(err, &swe) || !errors.Is(err, ErrUnroutable) || swe.Queue != dlq {
					t.Fatalf("awaited Settle = %v, want a SettleWriteError for %s wrapping ErrUnroutable", err, dlq)
				}
				if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
					t.Fatal(err) // what the runtime does after a failed settle write
				}
			}
			d2 := receive(t, c, 30*time.Second)
			if string(d2.Body) != string(body) {
				t.Fatalf("after the returned write the consumer handed out %q, want the same message again", d2.Body)
			}
			if err := c.Settle(ctx, d2, write(d2)); err != nil {
				t.Fatalf("Settle after the return: %v", err)
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if got := drain(t, ch, dlq); len(got) != 1 || got[0] != string(body) {
				t.Fatalf("%s holds %q, want the one write", dlq, got)
			}
			if n := queueCount(t, ch, q); n != 0 {
				t.Fatalf("%s holds %d messages, want 0 (acked once its write landed)", q, n)
			}
		})
	}
}

// TestDeadLetterQueueDeletedUnderRunningApp: an App whose handler always fails
// dead-letters every message; the dead-letter queue is deleted twice while it runs
// (each time once it is empty and no dead-letter write is in flight, so the deletion
// itself destroys nothing). Every message must end on the dead-letter queue (declared
// again by the transport) or still be on the work queue: none lost. Before the
// mandatory flag, dead letters written after a deletion were confirmed by RabbitMQ and
// dropped.
func TestDeadLetterQueueDeletedUnderRunningApp(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "awaited"}[pipelined], func(t *testing.T) {
			deadLetterQueueDeleted(t, pipelined)
		})
	}
}

func deadLetterQueueDeleted(t *testing.T, pipelined bool) {
	const n, workers = 300, 4
	ctx := ctxT(t)
	q := newQueue(t)
	dlq := q + ".dlq"
	tr := openT(t, WithPipelinedSettles(pipelined))
	app, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithDeadLetter(true),
		babelqueue.WithMaxAttempts(1), babelqueue.WithConcurrency(workers), babelqueue.WithPrefetch(16),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))))
	if err != nil {
		t.Fatal(err)
	}
	// The handler pauses every worker at two points while the test deletes the
	// dead-letter queue, so the deletions fall in the middle of the run.
	var (
		handled atomic.Int64
		mu      sync.Mutex
		gate    chan struct{} // closed to resume; nil when not paused
		parked  int           // the workers waiting for gate
		paused  = make(chan struct{}, 2)
	)
	app.Handle("urn:babel:t:dlqdel", func(ctx context.Context, m *babelqueue.Message) error {
		if k := handled.Add(1); k == n/3 || k == 2*n/3 {
			mu.Lock()
			gate = make(chan struct{})
			mu.Unlock()
			paused <- struct{}{}
		}
		mu.Lock()
		g := gate
		if g != nil {
			parked++
		}
		mu.Unlock()
		if g != nil {
			select {
			case <-g:
			case <-ctx.Done():
			}
		}
		return errors.New("always fails")
	})
	want := map[string]bool{}
	for i := range n {
		id, err := app.Publish(ctx, "urn:babel:t:dlqdel", map[string]int{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		want[id] = true
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- app.Run(runCtx) }()

	conn := rawConn(t)
	got := map[string]int{}
	// take moves what the dead-letter queue holds into got; it reports false when the
	// queue does not exist (deleted and not declared again yet; ch is then closed).
	take := func(ch *amqp091.Channel) bool {
		for {
			m, ok, err := ch.Get(dlq, true)
			if err != nil {
				var ae *amqp091.Error
				if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
					return false
				}
				t.Fatalf("get %s: %v", dlq, err)
			}
			if !ok {
				return true
			}
			got[m.MessageId]++
		}
	}
	deletions := 0
	for deletions < 2 {
		select {
		case <-paused:
		case err := <-ran:
			t.Fatalf("Run ended before the deletions: %v", err)
		case <-ctx.Done():
			t.Fatal("the handler never paused")
		}
		// Wait until no dead-letter write is in flight: every worker parked in the
		// handler (none is settling) and every write made before confirmed. RabbitMQ
		// confirms, and does not return, a write routed to the queue while the queue is
		// being deleted, empty or not: a deletion racing a write would destroy it.
		for {
			mu.Lock()
			p := parked
			mu.Unlock()
			if p == workers && writesInFlight(tr) == 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%d of %d workers parked, %d writes in flight: no quiet moment to delete the dead-letter queue", p, workers, writesInFlight(tr))
			}
			time.Sleep(time.Millisecond)
		}
		// Empty the dead-letter queue into got, then delete it only if it is still empty,
		// so no dead letter dies with it.
		for {
			ch := rawChannel(t, conn)
			if !take(ch) {
				break // not there: nothing to delete
			}
			if _, err := ch.QueueDelete(dlq, false, true, false); err == nil {
				_ = ch.Close()
				break
			}
			if ctx.Err() != nil {
				t.Fatal("could not delete the dead-letter queue")
			}
		}
		deletions++
		mu.Lock()
		close(gate)
		gate, parked = nil, 0
		mu.Unlock()
	}
	// Wait until every message is dead-lettered, for 30 s at most (a hang guard: the
	// count below says what is missing).
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		ch := rawChannel(t, conn)
		take(ch)
		_ = ch.Close()
		if len(got) < n {
			time.Sleep(100 * time.Millisecond)
		}
	}
	stop()
	if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
	if !take(rawChannel(t, conn)) {
		t.Errorf("the dead-letter queue was not declared again after the deletions")
	}
	ch := rawChannel(t, conn)
	left := map[string]int{}
	for {
		m, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatalf("get %s: %v", q, err)
		}
		if !ok {
			break
		}
		left[m.MessageId]++
	}
	var lost []string
	dups := 0
	for id := range want {
		if got[id] == 0 && left[id] == 0 {
			lost = append(lost, id)
		}
		dups += max(got[id]-1, 0)
	}
	t.Logf("%d messages: %d dead letters read (%d duplicates), %d left on the work queue, %d lost; the dead-letter queue deleted %d times",
		n, len(got), dups, len(left), len(lost), deletions)
	if len(lost) > 0 {
		t.Fatalf("%d messages lost (neither on the dead-letter queue nor on the work queue), e.g. %s", len(lost), lost[0])
	}
}

// writesInFlight counts tr's writes not confirmed yet (registered for their returns
// until their confirms are in) on its idle confirm channels: every write in flight when
// none of its channels is in use (no Publish or Settle running).
func writesInFlight(tr *Transport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, pc := range tr.idle {
		if pc.rt == nil {
			continue
		}
		pc.rt.mu.Lock()
		for _, st := range pc.rt.pending {
			n += st.n
		}
		pc.rt.mu.Unlock()
	}
	return n
}
