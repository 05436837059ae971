package pgstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// benchTargets are the brokers the relay is measured on.
var benchTargets = []target{targets[0], targets[2]} // redis, kafka

// BenchmarkRelay measures rows relayed per second from PostgreSQL to the broker (claim,
// confirmed publish, delete, commit) with batches of 1, 100 and 1,000, beside the
// baselines of the same messages in the same run: plain Publish one at a time (what a
// service does without an outbox; on Kafka followed by a flush, so every message is
// delivered) and PublishConfirmed in batches without the database.
//
//	go test -run '^$' -bench BenchmarkRelay -benchtime 10000x -benchmem ./outbox/pgstore/
func BenchmarkRelay(b *testing.B) {
	for _, tg := range benchTargets {
		b.Run(tg.name, func(b *testing.B) {
			b.Run("publish", func(b *testing.B) { benchPublish(b, tg) })
			for _, n := range []int{1, 100, 1000} {
				b.Run(fmt.Sprintf("confirmed/batch=%d", n), func(b *testing.B) { benchConfirmed(b, tg, n) })
			}
			for _, n := range []int{1, 100, 1000} {
				b.Run(fmt.Sprintf("relay/batch=%d", n), func(b *testing.B) { benchRelay(b, tg, n) })
			}
		})
	}
}

// benchMessages prepares n messages for queue as Writer.Write would store them.
func benchMessages(b *testing.B, queue string, n int) []*transport.Message {
	b.Helper()
	app, err := babelqueue.New(memory.New(), babelqueue.WithQueue(queue), babelqueue.WithLogger(testLogger(b)))
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([]*transport.Message, n)
	ctx := context.Background()
	for i := range msgs {
		opts := []babelqueue.PublishOption{babelqueue.WithHeaders(map[string]string{"traceparent": traceparent})}
		if k := keyOf(i); k != "" {
			opts = append(opts, babelqueue.WithKey([]byte(k)))
		}
		if msgs[i], err = app.Prepare(ctx, "urn:babel:outbox:bench", data{N: i, K: keyOf(i)}, opts...); err != nil {
			b.Fatal(err)
		}
	}
	return msgs
}

func rowsPerSecond(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

func benchPublish(b *testing.B, tg target) {
	q := tg.newQueue(b)
	tr := tg.open(b, nil)
	msgs := benchMessages(b, q, b.N)
	ctx := context.Background()
	b.ResetTimer()
	for _, m := range msgs {
		if err := tr.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	if k, ok := tr.(*kafka.Transport); ok {
		if err := k.Producer().Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	rowsPerSecond(b)
}

func benchConfirmed(b *testing.B, tg target, batch int) {
	q := tg.newQueue(b)
	tr := tg.open(b, nil)
	msgs := benchMessages(b, q, b.N)
	ctx := context.Background()
	b.ResetTimer()
	for len(msgs) > 0 {
		n := min(batch, len(msgs))
		if err := transport.PublishConfirmed(ctx, tr, msgs[:n]); err != nil {
			b.Fatal(err)
		}
		msgs = msgs[n:]
	}
	b.StopTimer()
	rowsPerSecond(b)
}

func benchRelay(b *testing.B, tg target, batch int) {
	store, db := newStore(b)
	q := tg.newQueue(b)
	tr := tg.open(b, nil)
	msgs := benchMessages(b, q, b.N)
	ctx := context.Background()
	for len(msgs) > 0 {
		n := min(1000, len(msgs))
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Save(ctx, tx, msgs[:n]...); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		msgs = msgs[n:]
	}
	relay := outbox.NewRelay(store, tr, outbox.WithBatchSize(batch), outbox.WithLogger(testLogger(b)))
	b.ResetTimer()
	res, err := relay.Drain(ctx)
	b.StopTimer()
	if err != nil || res.Published != b.N {
		b.Fatalf("Drain: %+v, %v; want %d published", res, err, b.N)
	}
	rowsPerSecond(b)
}
