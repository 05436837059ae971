package redis_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// held counts the reservations Redis holds for queue q: the deadline members of the
// default layout, or Laravel's reserved set.
func held(t *testing.T, c *goredis.Client, q string, laravel bool) int64 {
	t.Helper()
	key := q + ":processing:deadlines"
	if laravel {
		key = "bqtest:" + q + ":reserved"
	}
	n, err := c.ZCard(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var layouts = []struct {
	name    string
	laravel bool
	opts    []bqredis.Option
}{
	{"default", false, nil},
	{"laravel", true, []bqredis.Option{bqredis.WithLaravel("bqtest:")}},
}

// TestDeferredAcksRideWithTheNextReservation: with deferred acks an Ack returns while
// Redis still holds the reservation; the consumer's next reservation carries the
// removal, and Close sends what is left.
func TestDeferredAcksRideWithTheNextReservation(t *testing.T) {
	for _, layout := range layouts {
		t.Run(layout.name, func(t *testing.T) {
			ctx := ctxT(t)
			admin := client(t)
			q := transporttest.UniqueName("bqtest")
			cleanKeys(t, admin, "*"+q+"*")
			// A linger far longer than the test: only a reservation or Close sends acks.
			tr := newTransport(t, client(t), append([]bqredis.Option{bqredis.WithDeferredAcks(time.Hour)}, layout.opts...)...)
			cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{"one", "two"} {
				if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: envelope(n)}); err != nil {
					t.Fatal(err)
				}
			}
			d1 := transporttest.Receive(t, cons, 10*time.Second)
			if err := cons.Settle(ctx, d1, transport.Settlement{Outcome: transport.Ack}); err != nil {
				t.Fatal(err)
			}
			if n := held(t, admin, q, layout.laravel); n != 1 {
				t.Fatalf("after a deferred ack Redis holds %d reservations, want the acked one still (1)", n)
			}
			d2 := transporttest.Receive(t, cons, 10*time.Second)
			if !bytes.Contains(d2.Body, []byte(`"two"`)) {
				t.Fatalf("second delivery %q", d2.Body)
			}
			if n := held(t, admin, q, layout.laravel); n != 1 {
				t.Fatalf("after the next reservation Redis holds %d reservations, want only the new one (1)", n)
			}
			if err := cons.Settle(ctx, d2, transport.Settlement{Outcome: transport.Ack}); err != nil {
				t.Fatal(err)
			}
			if err := cons.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if n := held(t, admin, q, layout.laravel); n != 0 {
				t.Fatalf("after Close Redis holds %d reservations, want 0", n)
			}
			if !layout.laravel {
				if n := admin.LLen(ctx, q+":processing").Val(); n != 0 {
					t.Fatalf("after Close %s:processing holds %d elements", q, n)
				}
			}
			// Nothing comes back: both messages were acknowledged for good.
			again, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close(ctx)
			transporttest.ExpectNothing(t, again, time.Second)
		})
	}
}

// TestDeferredAckLingerSendsIt: an ack no reservation carries goes after the linger.
func TestDeferredAckLingerSendsIt(t *testing.T) {
	ctx := ctxT(t)
	admin := client(t)
	q := transporttest.UniqueName("bqtest")
	cleanKeys(t, admin, "*"+q+"*")
	tr := newTransport(t, client(t), bqredis.WithDeferredAcks(20*time.Millisecond))
	cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: envelope("linger")}); err != nil {
		t.Fatal(err)
	}
	d := transporttest.Receive(t, cons, 10*time.Second)
	if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for held(t, admin, q, false) != 0 || admin.LLen(ctx, q+":processing").Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the deferred ack was not sent within 10s of a 20ms linger")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeferredAckAfterACrashIsRedelivered: a worker that dies between a deferred ack
// and its removal leaves the message reserved; it comes back after retry_after.
func TestDeferredAckAfterACrashIsRedelivered(t *testing.T) {
	ctx := ctxT(t)
	admin := client(t)
	q := transporttest.UniqueName("bqtest")
	cleanKeys(t, admin, "*"+q+"*")
	ca := newClient(t)
	a := newTransport(t, ca, bqredis.WithRetryAfter(time.Second), bqredis.WithDeferredAcks(time.Hour))
	body := envelope("crash-after-ack")
	if err := a.Publish(ctx, &transport.Message{Queue: q, Body: body}); err != nil {
		t.Fatal(err)
	}
	consA, err := a.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := transporttest.Receive(t, consA, 10*time.Second)
	if err := consA.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	_ = ca.Close() // the process dies before the removal is sent

	b := newTransport(t, client(t), bqredis.WithRetryAfter(time.Second))
	consB, err := b.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer consB.Close(ctx)
	dB := transporttest.Receive(t, consB, 15*time.Second)
	if !bytes.Equal(dB.Body, body) {
		t.Fatalf("redelivered %q, want %q", dB.Body, body)
	}
}

// TestDeferredAckOfALapsedReservationIsLoggedAndTouchesNothing: an ack deferred past
// retry_after finds its reservation swept and re-reserved by another worker; it is
// refused (the gate), logged, and the other worker's reservation stays intact.
func TestDeferredAckOfALapsedReservationIsLoggedAndTouchesNothing(t *testing.T) {
	ctx := ctxT(t)
	admin := client(t)
	q := transporttest.UniqueName("bqtest")
	cleanKeys(t, admin, "*"+q+"*")
	var logs transporttest.LogBuffer
	a := newTransport(t, client(t), bqredis.WithRetryAfter(time.Second), bqredis.WithDeferredAcks(time.Hour),
		bqredis.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err := a.Publish(ctx, &transport.Message{Queue: q, Body: envelope("late")}); err != nil {
		t.Fatal(err)
	}
	consA, err := a.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	dA := transporttest.Receive(t, consA, 10*time.Second)

	b := newTransport(t, client(t), bqredis.WithRetryAfter(time.Minute))
	consB, err := b.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer consB.Close(ctx)
	dB := transporttest.Receive(t, consB, 15*time.Second) // after A's reservation lapsed

	if err := consA.Settle(ctx, dA, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	if err := consA.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "lapsed before its deferred ack") {
		t.Fatalf("no warning about the lapsed reservation; log:\n%s", logs.String())
	}
	if n := held(t, admin, q, false); n != 1 || admin.LLen(ctx, q+":processing").Val() != 1 {
		t.Fatalf("B's reservation was touched: %d deadline members, %d processing elements",
			n, admin.LLen(ctx, q+":processing").Val())
	}
	if err := consB.Settle(ctx, dB, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatalf("B's ack: %v", err)
	}
}

// TestSyncAcksSendsDeferredAcks: transport.SyncAcks returns once the deferred acks made
// before it are in Redis, as a tool that moves messages between queues needs.
func TestSyncAcksSendsDeferredAcks(t *testing.T) {
	ctx := ctxT(t)
	admin := client(t)
	q := transporttest.UniqueName("bqtest")
	cleanKeys(t, admin, "*"+q+"*")
	tr := newTransport(t, client(t), bqredis.WithDeferredAcks(time.Hour))
	cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: envelope("sync")}); err != nil {
		t.Fatal(err)
	}
	d := transporttest.Receive(t, cons, 10*time.Second)
	if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	if n := held(t, admin, q, false); n != 1 {
		t.Fatalf("after a deferred ack Redis holds %d reservations, want the acked one still (1)", n)
	}
	if err := transport.SyncAcks(ctx, cons); err != nil {
		t.Fatal(err)
	}
	if n := held(t, admin, q, false); n != 0 || admin.LLen(ctx, q+":processing").Val() != 0 {
		t.Fatalf("after SyncAcks Redis holds %d reservations and %d processing elements, want none",
			n, admin.LLen(ctx, q+":processing").Val())
	}
}
