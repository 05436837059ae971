package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// calls records the round trips a go-redis client makes: one line per command or
// pipeline, the command names joined by "+" (but a new connection's handshake).
type calls struct {
	mu   sync.Mutex
	sent []string
}

func (h *calls) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *calls) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}

func (h *calls) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.add(cmds...)
		return next(ctx, cmds)
	}
}

func (h *calls) add(cmds ...goredis.Cmder) {
	var names []string
	for _, c := range cmds {
		switch c.Name() {
		case "hello", "client", "auth", "select": // a new connection's handshake
		default:
			names = append(names, c.Name())
		}
	}
	if len(names) == 0 {
		return
	}
	h.mu.Lock()
	h.sent = append(h.sent, strings.Join(names, "+"))
	h.mu.Unlock()
}

func (h *calls) since(n int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.sent[n:]...)
}

// looking is a consumer of a new queue whose first Receive waits in Redis: its blocking
// look is out, and what it receives comes on first.
type looking struct {
	cons  transport.Consumer
	calls *calls // the consumer client's round trips
	out   int    // how many there were up to the look
	first chan *transport.Delivery
	q     string
}

// newLooking opens a consumer of a new queue on the Redis at url with prefetch, on a
// client of its own, and returns once its first Receive has sent the look and the look
// waits in Redis.
func newLooking(t *testing.T, ctx context.Context, url string, prefetch int, opts ...bqredis.Option) *looking {
	t.Helper()
	l := &looking{calls: &calls{}, first: make(chan *transport.Delivery, 1), q: transporttest.UniqueName("bqtest")}
	copts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	copts.ReadTimeout = time.Minute // the look may wait its whole poll interval
	c := goredis.NewClient(copts)
	t.Cleanup(func() { _ = c.Close() })
	cleanKeys(t, c, "*"+l.q+"*") // registered after Close, so it runs before
	c.AddHook(l.calls)
	tr := newTransport(t, c, append([]bqredis.Option{bqredis.WithPollInterval(20 * time.Second)}, opts...)...)
	if l.cons, err = tr.Consume(ctx, l.q, transport.ConsumeOptions{Prefetch: prefetch}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.cons.Close(context.WithoutCancel(ctx)) })
	go func() {
		d, err := l.cons.Receive(ctx)
		if err != nil {
			t.Error(err)
		}
		l.first <- d
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		sent := l.calls.since(0)
		if n := len(sent); n > 0 && strings.Contains(sent[n-1], "blmove+") { // a due sweep may go ahead
			l.out = n
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no blocking look after 10s; calls: %v", sent)
		}
	}
	time.Sleep(50 * time.Millisecond) // the look is waiting in Redis now
	return l
}

// arrivesWithTheLook checks that the first Receive returns the message whose data.n is
// n within 10 s, in the answer to the look: no round trip after it.
func (l *looking) arrivesWithTheLook(t *testing.T, n string) {
	t.Helper()
	select {
	case d := <-l.first:
		if d == nil || !strings.Contains(string(d.Body), `"`+n+`"`) {
			t.Fatalf("received %v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the message %q did not arrive within 10s", n)
	}
	if more := l.calls.since(l.out); len(more) != 0 {
		t.Fatalf("the message arrived after %d more round trip(s) %v; want it in the answer to the look's", len(more), more)
	}
}

// TestIdleQueueOneRoundTrip (issue 39): a consumer waiting on an empty queue has one
// round trip out, the blocking look with the reserve script behind it (and a sweep
// ahead of it when one is due), and a message pushed then reaches it with that round
// trip's answer: no second call.
func TestIdleQueueOneRoundTrip(t *testing.T) {
	for _, layout := range layouts {
		t.Run(layout.name, func(t *testing.T) {
			ctx := ctxT(t)
			l := newLooking(t, ctx, brokerURL(t), 1, layout.opts...)
			key := l.q
			if layout.laravel {
				key = "bqtest:" + l.q
			}
			if err := client(t).RPush(ctx, key, envelope("idle")).Err(); err != nil {
				t.Fatal(err)
			}
			l.arrivesWithTheLook(t, "idle")
		})
	}
}

// TestFirstWakeOnAFreshRedis: on a Redis that has none of the transport's scripts in its
// cache (a new server, a restart), the message that ends a consumer's first wait still
// comes in the answer to the look: the script behind it was loaded ahead of it, in the
// same round trip.
func TestFirstWakeOnAFreshRedis(t *testing.T) {
	brokerURL(t) // the same gate as every integration test
	addr, _ := redisServer(t)
	ctx := ctxT(t)
	l := newLooking(t, ctx, "redis://"+addr+"/0", 1)
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	defer admin.Close()
	if err := admin.RPush(ctx, l.q, envelope("fresh")).Err(); err != nil {
		t.Fatal(err)
	}
	l.arrivesWithTheLook(t, "fresh")
}

// TestIdleSweepAfterScriptFlush: a consumer waiting on an idle queue sweeps lapsed
// reservations ahead of its look even after Redis lost its script cache (a restart, a
// SCRIPT FLUSH) while it waited: the reservation it finds lapsed reaches it.
func TestIdleSweepAfterScriptFlush(t *testing.T) {
	brokerURL(t) // the same gate as every integration test
	addr, _ := redisServer(t)
	ctx := ctxT(t)
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	tr := newTransport(t, c, bqredis.WithPollInterval(200*time.Millisecond))
	q := transporttest.UniqueName("bqtest")
	cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	got := make(chan *transport.Delivery, 1)
	go func() {
		d, err := cons.Receive(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- d
	}()
	time.Sleep(500 * time.Millisecond) // the consumer waits on the empty queue, its scripts loaded
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// A reservation another consumer made and lost: its element in :processing, its
	// deadline member lapsed a minute ago.
	el := string(envelope("lapsed"))
	if err := c.RPush(ctx, q+":processing", el).Err(); err != nil {
		t.Fatal(err)
	}
	member := strings.Repeat("ab", 16) + ":" + el
	if err := c.ZAdd(ctx, q+":processing:deadlines", goredis.Z{Score: float64(time.Now().Add(-time.Minute).Unix()), Member: member}).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if d == nil || !strings.Contains(string(d.Body), `"lapsed"`) {
			t.Fatalf("received %v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lapsed reservation did not come back to the waiting consumer within 10s")
	}
}

// TestWokenByABurst (issue 39): messages pushed together to a queue whose consumer
// waits on it all reach the consumer without a second wait: as many as its prefetch in
// the answer to the look, the rest by a reserve that does not wait, in order, each once.
func TestWokenByABurst(t *testing.T) {
	for _, c := range []struct{ prefetch, burst int }{{1, 1}, {1, 2}, {4, 3}, {4, 4}, {4, 6}} {
		t.Run(fmt.Sprintf("prefetch=%d/burst=%d", c.prefetch, c.burst), func(t *testing.T) {
			ctx := ctxT(t)
			l := newLooking(t, ctx, brokerURL(t), c.prefetch)
			admin := client(t)
			burst := make([]any, c.burst)
			for i := range burst {
				burst[i] = envelope(fmt.Sprintf("burst-%d", i))
			}
			if err := admin.RPush(ctx, l.q, burst...).Err(); err != nil {
				t.Fatal(err)
			}
			var got []string
			d := <-l.first
			for {
				if d == nil {
					t.Fatal("no delivery")
				}
				got = append(got, string(d.Body))
				if len(got) == c.burst {
					break
				}
				if len(got) >= c.prefetch { // every slot is held: free this one
					if err := l.cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
						t.Fatal(err)
					}
				}
				var err error
				if d, err = l.cons.Receive(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for i, b := range got {
				if !strings.Contains(b, fmt.Sprintf(`"burst-%d"`, i)) {
					t.Fatalf("delivery %d is %s; want burst-%d", i, b, i)
				}
			}
			more := l.calls.since(l.out)
			for _, call := range more {
				if strings.Contains(call, "blmove") {
					t.Fatalf("the burst waited again: calls after the look %v", more)
				}
			}
			if c.burst <= c.prefetch && len(more) != 0 {
				t.Fatalf("the burst took %d more round trip(s) %v; want it in the answer to the look", len(more), more)
			}
			if n, err := admin.LLen(ctx, l.q).Result(); err != nil || n != 0 {
				t.Fatalf("%d left in the ready list (%v)", n, err)
			}
		})
	}
}
