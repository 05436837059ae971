package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// breaker is a dialer that can cut every connection it made and refuse new ones: the
// broker becomes unreachable for the clients using it, as in a broker outage, without
// stopping the shared test broker.
type breaker struct {
	mu     sync.Mutex
	broken bool
	conns  []net.Conn
}

func (b *breaker) dial(ctx context.Context, network, host string) (net.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.broken {
		return nil, errors.New("test: broker unreachable")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err == nil {
		b.conns = append(b.conns, c)
	}
	return c, err
}

func (b *breaker) set(broken bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.broken = broken
	if broken {
		for _, c := range b.conns {
			_ = c.Close()
		}
		b.conns = nil
	}
}

// TestOutageLosesNothing cuts the transport off the broker mid-run: settle writes fail
// with a typed delivery error within the delivery timeout, the deliveries are rewound,
// and once the broker is reachable again every record is settled, its write is on the
// output topic, and the group's offsets cover everything.
func TestOutageLosesNothing(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	q := newTopic(t, "bqtest-outage")
	out := q + ".out"
	createTopic(t, q, 1)
	createTopic(t, out, 1)
	br, prod, tr := breakable(t, "bqtest-outage", 3*time.Second)
	const n = 20
	for i := range n {
		publishOK(t, tr, &transport.Message{Queue: q, Body: fmt.Appendf(nil, `{"n":%d}`, i), Key: fmt.Appendf(nil, "k%d", i)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c := consumeOn(t, tr, q, 4)
	settled := map[string]bool{}
	write := func(d *transport.Delivery) transport.Settlement {
		return transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: out, Body: d.Body, Key: d.Key}}}
	}
	for len(settled) < n/4 {
		d := transporttest.Receive(t, c, 30*time.Second)
		settleOK(t, c, d, write(d))
		settled[string(d.Body)] = true
	}

	br.set(true)
	d := transporttest.Receive(t, c, 30*time.Second) // already fetched
	err := c.Settle(ctx, d, write(d))
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.Is(err, kafka.ErrDelivery) {
		t.Fatalf("settle write during the outage: %v, want a delivery error", err)
	}
	rewind(t, c, d)
	time.Sleep(2 * time.Second)
	br.set(false)

	failed := 0
	for len(settled) < n && ctx.Err() == nil {
		d := transporttest.Receive(t, c, 60*time.Second)
		err := c.Settle(ctx, d, write(d))
		switch {
		case err == nil:
			settled[string(d.Body)] = true
		case errors.Is(err, transport.ErrSettleWrite):
			failed++
			rewind(t, c, d)
		case errors.Is(err, kafka.ErrRevoked):
		default:
			t.Fatalf("Settle after the outage: %v", err)
		}
	}
	if len(settled) != n {
		t.Fatalf("settled %d of %d records", len(settled), n)
	}
	t.Logf("settle writes that failed after reconnecting: %d", failed)
	seen := map[string]bool{}
	for _, r := range readTopic(t, out, n) {
		seen[string(r.Value)] = true
		if want := "k" + string(r.Value[5:len(r.Value)-1]); string(r.Key) != want {
			t.Errorf("output %s has key %q, want %q", r.Value, r.Key, want)
		}
	}
	if len(seen) != n {
		t.Errorf("output topic holds %d distinct records, want %d", len(seen), n)
	}
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer closeCancel()
	if err := c.Close(closeCtx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c2 := consumeOn(t, tr, q, 4)
	transporttest.ExpectNothing(t, c2, 5*time.Second)
}

// rewind gives d back; when its partition was lost meanwhile (the group session broke
// during the outage) the record comes back through the rejoin instead, which Settle
// reports with ErrRevoked.
func rewind(t *testing.T, c transport.Consumer, d *transport.Delivery) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil && !errors.Is(err, kafka.ErrRevoked) {
		t.Fatalf("Rewind: %v", err)
	}
}

// TestTimedOutSettleWriteSparesPublishes: during an outage a settle write times out while
// the user's fire-and-forget publishes to the same partition are buffered behind it. The
// settle fails with a delivery error, and once the broker is reachable again every one of
// those publishes is on the topic: giving up on the settle write must not fail the records
// buffered after it (franz-go fails a whole partition's buffer when its first record's
// context ends).
func TestTimedOutSettleWriteSparesPublishes(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	q := newTopic(t, "bqtest-spare")
	out := q + ".out"
	createTopic(t, q, 1)
	createTopic(t, out, 1)
	br, prod, tr := breakable(t, "bqtest-spare", 2*time.Second)
	// The producer knows q but has not written to out yet: the settle write is the first
	// record of a topic whose partitions it must learn, and the publishes wait with it.
	publishOK(t, tr, &transport.Message{Queue: q, Body: []byte(`{"job":"urn:babel:t:spare"}`)})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c := consumeOn(t, tr, q, 1)
	d := transporttest.Receive(t, c, 30*time.Second)

	br.set(true)
	settled := make(chan error, 1)
	go func() {
		settled <- c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: out, Body: []byte(`{"settle":true}`)}}})
	}()
	time.Sleep(300 * time.Millisecond) // the settle write is buffered first
	const n = 10
	for i := range n {
		publishOK(t, tr, &transport.Message{Queue: out, Body: fmt.Appendf(nil, `{"n":%d}`, i)})
	}
	if err := <-settled; !errors.Is(err, transport.ErrSettleWrite) || !errors.Is(err, kafka.ErrDelivery) {
		t.Fatalf("settle write during the outage: %v, want a delivery error", err)
	}
	time.Sleep(2 * time.Second) // the producer keeps failing to dial with the write given up
	br.set(false)
	if err := prod.Flush(ctx); err != nil {
		t.Fatalf("Flush after the outage: %v", err)
	}
	held := topicValues(t, out, 5*time.Second)
	for i := range n {
		if v := fmt.Sprintf(`{"n":%d}`, i); !slices.Contains(held, v) {
			t.Errorf("publish %s, made while the settle write waited, is not on %s (it holds %q)", v, out, held)
		}
	}
	rewind(t, c, d)
}

// breakable opens a transport in a new consumer group (named from prefix) whose
// producer and consumers dial through a breaker, with the given delivery timeout and
// settle writes that Settle waits for (not pipelined). Its
// producer refreshes metadata at most every 250ms, as Open's does, so it keeps trying
// to reload partitions while the broker is away.
func breakable(t *testing.T, prefix string, deliveryTimeout time.Duration, opts ...kafka.Option) (*breaker, *kgo.Client, *kafka.Transport) {
	t.Helper()
	br := &breaker{}
	base := []kgo.Opt{kgo.SeedBrokers(seeds(t)...), kgo.Dialer(br.dial)}
	prod, err := kgo.NewClient(append(base, kgo.MetadataMinAge(250*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	tr, err := kafka.New(prod, kafka.Factory(base...), append([]kafka.Option{kafka.WithGroup(transporttest.UniqueName(prefix)), kafka.WithDeliveryTimeout(deliveryTimeout),
		kafka.WithPipelinedSettles(false)}, opts...)...) // these tests look at the failed settle writes themselves
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return br, prod, tr
}

// topicValues reads topic from the start for quiet (with the extra consumer options)
// and returns the values it holds.
func topicValues(t testing.TB, topic string, quiet time.Duration, extra ...kgo.Opt) []string {
	t.Helper()
	cl := rawClient(t, append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, extra...)...)
	ctx, cancel := context.WithTimeout(context.Background(), quiet)
	defer cancel()
	var vs []string
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { vs = append(vs, string(r.Value)) })
	}
	return vs
}

// TestCommitOutageStopsWorkingAhead cuts a consumer off the broker with hundreds of
// records fetched and not handled: it cannot commit, so it stops handing out the
// records it holds, once as many are handed out and not committed as max_uncommitted
// allows, or once its commits have failed for max_uncommitted_time, instead of handling
// them all to have them delivered again. Once the broker is reachable it goes on, and
// every record is settled and committed.
func TestCommitOutageStopsWorkingAhead(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	cases := []struct {
		name   string
		opts   []kafka.Option
		handle time.Duration // each handler's work
		bound  int           // the most records handed out while cut off; 0: not counted
	}{
		{"records", []kafka.Option{kafka.WithMaxUncommitted(100), kafka.WithMaxUncommittedTime(time.Hour)}, 0, 100},
		{"time", []kafka.Option{kafka.WithMaxUncommitted(1_000_000), kafka.WithMaxUncommittedTime(time.Second)}, 20 * time.Millisecond, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 600
			q := newTopic(t, "bqtest-ahead")
			createTopic(t, q, 1)
			// A session that outlasts the cut: the consumer keeps its partition.
			br, prod, tr := breakable(t, "bqtest-ahead", 3*time.Second, append(tc.opts, kafka.WithSessionTimeout(time.Minute))...)
			for i := range n {
				publishOK(t, tr, &transport.Message{Queue: q, Body: fmt.Appendf(nil, `{"n":%d}`, i)})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := prod.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			c := consumeOn(t, tr, q, 8)
			handled := map[string]int{}
			handle := func(d *transport.Delivery) {
				time.Sleep(tc.handle)
				handled[string(d.Body)]++
				if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil && !errors.Is(err, kafka.ErrRevoked) {
					t.Fatalf("Settle: %v", err)
				}
			}
			for len(handled) < 50 {
				handle(transporttest.Receive(t, c, 30*time.Second))
			}

			br.set(true)
			cut := 0
			for {
				rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
				d, err := c.Receive(rctx)
				rcancel()
				if errors.Is(err, context.DeadlineExceeded) {
					break
				}
				if err != nil {
					t.Fatalf("Receive while cut off: %v", err)
				}
				handle(d)
				if cut++; cut > n {
					t.Fatal("the consumer went on handing out records while cut off")
				}
			}
			if len(handled) == n {
				t.Fatalf("the consumer handled all %d records while it could not commit (%d of them cut off)", n, cut)
			}
			if tc.bound > 0 && cut > tc.bound {
				t.Errorf("the consumer handed out %d records while cut off, more than max_uncommitted (%d)", cut, tc.bound)
			}
			t.Logf("handed out while cut off: %d; handled before: %d", cut, len(handled)-cut)

			br.set(false)
			for len(handled) < n {
				handle(transporttest.Receive(t, c, 60*time.Second))
			}
			closeCtx, closeCancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer closeCancel()
			if err := c.Close(closeCtx); err != nil {
				t.Fatalf("Close: %v", err)
			}
			transporttest.ExpectNothing(t, consumeOn(t, tr, q, 8), 5*time.Second)
		})
	}
}
