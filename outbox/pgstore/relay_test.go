package pgstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/outbox/pgstore"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// fixture is an outbox table of the test's own and a queue on one broker.
type fixture struct {
	tg    target
	store *pgstore.Store
	db    *sql.DB
	queue string
	app   *babelqueue.App
	w     *outbox.Writer
}

func newFixture(t *testing.T, tg target, opts ...pgstore.Option) *fixture {
	t.Helper()
	tg.url(t) // fail (CI) or skip before any work when the broker is not there
	store, db := newStore(t, opts...)
	q := tg.newQueue(t)
	// The writer's app only prepares messages; it never publishes.
	app, err := babelqueue.New(memory.New(), babelqueue.WithQueue(q), babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{tg: tg, store: store, db: db, queue: q, app: app, w: outbox.NewWriter(app, store)}
}

// keyOf is the key of the i-th test message: one of 50, and none for every tenth.
func keyOf(i int) string {
	if i%10 == 9 {
		return ""
	}
	return fmt.Sprintf("key-%02d", i%50)
}

// write commits messages first to first+n-1 in transactions of up to 500 and returns
// their meta.ids in order. Message i carries data {"n": i, "k": keyOf(i)}, the key
// keyOf(i) (none when empty) and a traceparent header. Writer.Write stores each one;
// with bulk, the messages of a transaction are prepared first and stored by one Save.
func (f *fixture) write(t testing.TB, first, n int, bulk ...bool) []string {
	t.Helper()
	ctx := ctxT(t)
	var ids []string
	for i := first; i < first+n; {
		tx, err := f.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []*transport.Message
		for end := min(i+500, first+n); i < end && err == nil; i++ {
			opts := []babelqueue.PublishOption{babelqueue.WithHeaders(map[string]string{"traceparent": traceparent})}
			if k := keyOf(i); k != "" {
				opts = append(opts, babelqueue.WithKey([]byte(k)))
			}
			d := data{N: i, K: keyOf(i)}
			if len(bulk) > 0 && bulk[0] {
				var m *transport.Message
				if m, err = f.app.Prepare(ctx, "urn:babel:outbox:test", d, opts...); err == nil {
					msgs = append(msgs, m)
					ids = append(ids, m.Projection.MessageID)
				}
				continue
			}
			var id string
			if id, err = f.w.Write(ctx, tx, "urn:babel:outbox:test", d, opts...); err == nil {
				ids = append(ids, id)
			}
		}
		if err == nil && len(msgs) > 0 {
			err = f.store.Save(ctx, tx, msgs...)
		}
		if err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func (f *fixture) relay(t testing.TB, tr transport.Transport, opts ...outbox.RelayOption) *outbox.Relay {
	return outbox.NewRelay(f.store, tr, append([]outbox.RelayOption{
		outbox.WithLogger(testLogger(t)), outbox.WithPollInterval(20 * time.Millisecond),
	}, opts...)...)
}

// run runs r until the returned stop is called; stop returns Run's error.
func run(r *outbox.Relay) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return sync.OnceValue(func() error {
		cancel()
		return <-done
	})
}

// waitPending waits until the store holds at most n unpublished rows.
func (f *fixture) waitPending(t testing.TB, n int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, err := f.store.Pending(ctxT(t))
		if err == nil && got <= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows still pending after %s (want at most %d; last error %v)", got, timeout, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A message written in a transaction that rolls back is never published, with the
// business row it came with; one that commits is published once.
func TestRollbackPublishesNothingCommitPublishesOnce(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		f := newFixture(t, tg)
		ctx := ctxT(t)
		orders := "bqtest_orders_" + f.store.Table()[len("bqtest_outbox_"):]
		if _, err := f.db.ExecContext(ctx, "CREATE TABLE "+orders+" (id int PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = f.db.Exec("DROP TABLE IF EXISTS " + orders) })
		order := func(id int, commit bool) string {
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+orders+" VALUES ($1)", id); err != nil {
				t.Fatal(err)
			}
			mid, err := f.w.Write(ctx, tx, "urn:babel:orders:created", map[string]int{"order_id": id})
			if err != nil {
				t.Fatal(err)
			}
			if commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			return mid
		}
		order(1, false)
		committed := order(2, true)

		res, err := f.relay(t, tg.open(t, nil)).Drain(ctx)
		if err != nil || res.Published != 1 {
			t.Fatalf("Drain: %+v, %v; want 1 published", res, err)
		}
		gots := tg.collect(t, f.queue, 1, 2*time.Second, 30*time.Second)
		if len(gots) != 1 || gots[0].ID != committed {
			t.Fatalf("broker holds %d messages (%+v); want exactly the committed %s", len(gots), gots, committed)
		}
		var n int
		if err := f.db.QueryRowContext(ctx, "SELECT count(*) FROM "+orders).Scan(&n); err != nil || n != 1 {
			t.Fatalf("business rows: %d, %v; want the committed one", n, err)
		}
		f.waitPending(t, 0, time.Second)
	})
}

// The relay publishes the stored message byte for byte: the body, the key (nil, empty
// and binary apart, on Kafka), the out-of-band headers.
func TestKeyAndHeadersByteForByte(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		f := newFixture(t, tg)
		ctx := ctxT(t)
		keys := [][]byte{nil, {}, []byte("order-1042"), {0x00, 0xff, 0x80, 'k'}}
		headers := map[string]string{"traceparent": traceparent, "tracestate": "congo=t61rcWkgMzE", "x-tenant": "acme é ☕"}
		tx, err := f.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i, k := range keys {
			id, err := f.w.Write(ctx, tx, "urn:babel:outbox:bytes", map[string]any{"n": i, "s": "Caf\u00e9 <&> \u2028"},
				babelqueue.WithKey(k), babelqueue.WithHeaders(headers))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		stored := map[string][]byte{}
		for _, id := range ids {
			var b []byte
			if err := f.db.QueryRowContext(ctx, "SELECT body FROM "+f.store.Table()+" WHERE message_id = $1", id).Scan(&b); err != nil {
				t.Fatal(err)
			}
			stored[id] = b
		}
		if _, err := f.relay(t, tg.open(t, nil)).Drain(ctx); err != nil {
			t.Fatal(err)
		}
		gots := tg.collect(t, f.queue, len(ids), time.Second, 30*time.Second)
		if checkAll(t, gots, ids) != 0 {
			t.Fatalf("duplicates in a plain drain: %+v", gots)
		}
		for i, g := range gots {
			if string(g.Body) != string(stored[g.ID]) {
				t.Errorf("message %s: body\n got %q\nwant %q", g.ID, g.Body, stored[g.ID])
			}
			if !maps.Equal(g.Headers, headers) {
				t.Errorf("message %s: headers %v, want %v", g.ID, g.Headers, headers)
			}
			if tg.keys && !sameBytes(g.Key, keys[indexOf(ids, g.ID)]) {
				t.Errorf("message %d: key %q (nil %v), want %q (nil %v)", i, g.Key, g.Key == nil, keys[indexOf(ids, g.ID)], keys[indexOf(ids, g.ID)] == nil)
			}
		}
	})
}

func indexOf(ids []string, id string) int {
	for i, x := range ids {
		if x == id {
			return i
		}
	}
	return -1
}

// outageOptions are the relay options of the outage tests: small batches, a batch
// timeout, and a backoff short enough that the relay is back soon after the fault.
func outageOptions(batchTimeout time.Duration) []outbox.RelayOption {
	return []outbox.RelayOption{outbox.WithBatchSize(50), outbox.WithBatchTimeout(batchTimeout),
		outbox.WithBackoff(func(n int) time.Duration { return min(time.Duration(n)*100*time.Millisecond, time.Second) })}
}

// The broker goes away mid-run (a proxy cuts it): rows wait, nothing the broker did
// not confirm is marked published, and everything goes out when it is back.
func TestBrokerOutage(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		// Published rows are kept (retention) so the test can see which were marked.
		f := newFixture(t, tg, pgstore.WithRetention(time.Hour))
		p := tg.proxy(t)
		relay := f.relay(t, tg.open(t, p), outageOptions(5*time.Second)...)
		stop := run(relay)
		defer stop()

		ids := f.write(t, 0, 300)
		f.waitPending(t, 0, 30*time.Second)
		p.Down()
		t.Logf("%s: broker cut after %d published", tg.name, relay.Stats().Published)
		ids = append(ids, f.write(t, 300, 300)...)
		// Let the relay try while the broker is away.
		deadline := time.Now().Add(20 * time.Second)
		for relay.Stats().Failed == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(time.Second)
		if relay.Stats().Failed == 0 {
			t.Fatal("no publish failed while the broker was cut: the outage did not reach the relay")
		}
		pending, err := f.store.Pending(ctxT(t))
		if err != nil || pending == 0 {
			t.Fatalf("pending during the outage: %d, %v; rows written while the broker is away must wait", pending, err)
		}
		// Every row marked published so far is on the broker (read directly, not
		// through the cut proxy).
		marked := f.publishedIDs(t)
		onBroker := tg.collect(t, f.queue, len(marked), time.Second, 30*time.Second)
		seen := map[string]bool{}
		for _, g := range onBroker {
			seen[g.ID] = true
		}
		for _, id := range marked {
			if !seen[id] {
				t.Fatalf("row %s is marked published but the broker does not hold it", id)
			}
		}
		t.Logf("%s: during the outage %d rows marked published, all on the broker; %d pending; %d failed publishes", tg.name, len(marked), pending, relay.Stats().Failed)

		p.Up()
		f.waitPending(t, 0, 60*time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		var all []got
		if tg.rereads() {
			all = tg.collect(t, f.queue, len(ids), 2*time.Second, 30*time.Second)
		} else {
			all = append(onBroker, tg.collect(t, f.queue, len(ids)-len(seen), 2*time.Second, 30*time.Second)...)
		}
		dups := checkAll(t, all, ids)
		checkKeyOrder(t, all)
		t.Logf("%s: %d rows, all on the broker after the outage; %d duplicates (publishes that timed out and still landed)", tg.name, len(ids), dups)
	})
}

// publishedIDs returns the meta.ids of the rows marked published (kept by a retention).
func (f *fixture) publishedIDs(t testing.TB) []string {
	t.Helper()
	rows, err := f.db.QueryContext(ctxT(t), "SELECT message_id FROM "+f.store.Table()+" WHERE published_at IS NOT NULL")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// Two relays (each with its own pool and broker connection, as on two machines) share
// one table of 10,000 rows: every row is published, none twice, each key in order.
func TestTwoRelays(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		f := newFixture(t, tg)
		const n = 10000
		start := time.Now()
		ids := f.write(t, 0, n, true)
		t.Logf("%s: wrote %d rows in %s", tg.name, n, time.Since(start).Round(time.Millisecond))
		start = time.Now()
		other, err := pgstore.New(openDB(t, pgURL(t)), pgstore.WithTable(f.store.Table()))
		if err != nil {
			t.Fatal(err)
		}
		a := f.relay(t, tg.open(t, nil))
		b := outbox.NewRelay(other, tg.open(t, nil), outbox.WithLogger(testLogger(t)), outbox.WithPollInterval(20*time.Millisecond))
		stopA, stopB := run(a), run(b)
		f.waitPending(t, 0, 90*time.Second)
		if err := stopA(); err != nil {
			t.Fatal(err)
		}
		if err := stopB(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: relayed in %s", tg.name, time.Since(start).Round(time.Millisecond))
		start = time.Now()
		gots := tg.collect(t, f.queue, n, 2*time.Second, 60*time.Second)
		t.Logf("%s: read back in %s", tg.name, time.Since(start).Round(time.Millisecond))
		dups := checkAll(t, gots, ids)
		checkKeyOrder(t, gots)
		sa, sb := a.Stats(), b.Stats()
		t.Logf("%s: %d rows; relay A published %d in %d batches, relay B %d in %d; %d duplicates", tg.name, n, sa.Published, sa.Batches, sb.Published, sb.Batches, dups)
		if sa.Published+sb.Published != n {
			t.Fatalf("relays published %d+%d rows, want %d", sa.Published, sb.Published, n)
		}
		if dups != 0 {
			t.Fatalf("%d duplicates without any failure: two relays published the same row", dups)
		}
	})
}

// The database goes away mid-run (a proxy cuts the relay's connections): the relay logs,
// backs off and claims nothing; rows committed meanwhile wait and go out once it is back.
func TestDatabaseOutage(t *testing.T) {
	tg := targets[0] // the broker does not matter here
	f := newFixture(t, tg)
	p, proxied := faultproxy.StartURL(t, pgURL(t))
	store, err := pgstore.New(openDB(t, proxied), pgstore.WithTable(f.store.Table()))
	if err != nil {
		t.Fatal(err)
	}
	relay := outbox.NewRelay(store, tg.open(t, nil), append(outageOptions(3*time.Second),
		outbox.WithLogger(testLogger(t)), outbox.WithPollInterval(20*time.Millisecond))...)
	stop := run(relay)
	defer stop()

	ids := f.write(t, 0, 300)
	f.waitPending(t, 0, 30*time.Second)
	p.Down()
	cut := time.Now()
	ids = append(ids, f.write(t, 300, 300)...) // straight to the database, not through the proxy
	deadline := time.Now().Add(20 * time.Second)
	for relay.Stats().LastErrorAt.Before(cut) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	st := relay.Stats()
	if st.LastErrorAt.Before(cut) {
		t.Fatal("the relay reported no error while its database was cut")
	}
	time.Sleep(500 * time.Millisecond)
	if n, err := f.store.Pending(ctxT(t)); err != nil || n < 300 {
		t.Fatalf("%d rows pending while the relay's database is away, want at least the 300 written meanwhile (%v)", n, err)
	}
	t.Logf("database cut: relay error %q", st.LastError)

	p.Up()
	f.waitPending(t, 0, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	gots := tg.collect(t, f.queue, len(ids), 2*time.Second, 30*time.Second)
	dups := checkAll(t, gots, ids)
	checkKeyOrder(t, gots)
	t.Logf("%d rows, all on the broker after the database came back; %d duplicates (batches published whose commit was cut; the relay counted %d)", len(ids), dups, relay.Stats().Unmarked)
	if int64(dups) > relay.Stats().Unmarked {
		t.Fatalf("%d duplicates but only %d rows were published without being marked", dups, relay.Stats().Unmarked)
	}
}
