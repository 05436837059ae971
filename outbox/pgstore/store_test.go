package pgstore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/outbox/pgstore"
	"github.com/babelqueue-go/babelqueue/transport"
)

func save(t testing.TB, db *sql.DB, s *pgstore.Store, msgs ...*transport.Message) {
	t.Helper()
	ctx := ctxT(t)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, tx, msgs...); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// numbered returns n unkeyed messages to queue "q" whose bodies are 0, 1, 2, ...
func numbered(n int) []*transport.Message {
	msgs := make([]*transport.Message, n)
	for i := range msgs {
		msgs[i] = &transport.Message{Queue: "q", Body: []byte(fmt.Sprint(i))}
	}
	return msgs
}

// saveAndClaimAll saves msgs, claims them all (the claim is rolled back when the test
// ends) and returns the claimed records.
func saveAndClaimAll(t *testing.T, db *sql.DB, s *pgstore.Store, msgs []*transport.Message) []outbox.Record {
	t.Helper()
	save(t, db, s, msgs...)
	c := claim(t, s, len(msgs)+10)
	t.Cleanup(func() { _ = c.Rollback(context.Background()) })
	recs := c.Records()
	if len(recs) != len(msgs) {
		t.Fatalf("claimed %d rows, want %d", len(recs), len(msgs))
	}
	return recs
}

func ids(recs []outbox.Record) []int64 {
	var out []int64
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

func claim(t testing.TB, s *pgstore.Store, limit int) outbox.Claim {
	t.Helper()
	c, err := s.Claim(ctxT(t), limit)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A message comes back from the table exactly as it went in: body bytes, nil key apart
// from an empty one, headers, projection, attempts header and delay.
func TestRoundTripExact(t *testing.T) {
	s, db := newStore(t)
	msgs := []*transport.Message{
		{Queue: "q", Body: []byte(`{"job":"urn:babel:a:b","s":"Caf\u00e9 ☕"}`), Key: nil},
		{Queue: "q", Body: []byte{0x00, 0xff, '{'}, Key: []byte{}},
		{Queue: "q2", Body: []byte(`{}`), Key: []byte{0x00, 0x01, 0xfe},
			Headers:    map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x-t": "é <&> \"q\""},
			Projection: transport.Projection{URN: "urn:babel:a:b", TraceID: "tr", MessageID: "mid", Lang: "go", SchemaVersion: 1, CreatedAt: 1749132727000},
			Attempts:   2, Delay: 1500 * time.Millisecond},
	}
	recs := saveAndClaimAll(t, db, s, msgs)
	for i, r := range recs {
		got, want := r.Message, msgs[i]
		if got.Queue != want.Queue || !bytes.Equal(got.Body, want.Body) {
			t.Errorf("row %d: queue %q body %q, want %q %q", i, got.Queue, got.Body, want.Queue, want.Body)
		}
		if !bytes.Equal(got.Key, want.Key) || (got.Key == nil) != (want.Key == nil) {
			t.Errorf("row %d: key %q (nil %v), want %q (nil %v)", i, got.Key, got.Key == nil, want.Key, want.Key == nil)
		}
		if !maps.Equal(got.Headers, want.Headers) || got.Projection != want.Projection || got.Attempts != want.Attempts || got.Delay != want.Delay {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got, want)
		}
		if r.Attempts != 0 {
			t.Errorf("row %d: %d attempts, want 0", i, r.Attempts)
		}
	}
}

// A rolled-back transaction leaves no row; a committed one leaves its rows.
func TestSaveFollowsTheTransaction(t *testing.T) {
	s, db := newStore(t)
	ctx := ctxT(t)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, tx, &transport.Message{Queue: "q", Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Pending(ctx); n != 0 {
		t.Fatalf("an uncommitted row is visible: %d pending", n)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Pending(ctx); n != 0 {
		t.Fatalf("a rolled-back row is pending: %d", n)
	}
	if err := s.Save(ctx, nil, &transport.Message{Queue: "q"}); !errors.Is(err, pgstore.ErrNoTx) {
		t.Fatalf("Save without a transaction: %v", err)
	}
}

func TestSaveRefusesBadInput(t *testing.T) {
	s, db := newStore(t)
	ctx := ctxT(t)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, m := range []*transport.Message{
		nil,
		{Body: []byte("{}")},
		{Queue: "q", Headers: map[string]string{"bad": "a\x00b"}},
		{Queue: "q", Headers: map[string]string{"bad": "\xff"}},
	} {
		if err := s.Save(ctx, tx, m); err == nil {
			t.Errorf("Save(%+v) accepted it", m)
		}
	}
	if _, err := pgstore.New(db, pgstore.WithTable("x; DROP TABLE y")); !errors.Is(err, pgstore.ErrBadTable) {
		t.Errorf("a table name with SQL in it: %v", err)
	}
	if _, err := pgstore.Schema("Bad-Name"); !errors.Is(err, pgstore.ErrBadTable) {
		t.Errorf("Schema of a bad name: %v", err)
	}
}

// Two claims at once never hold the same row (FOR UPDATE SKIP LOCKED), and a claim
// rolled back (a relay that died) gives its rows back at once.
func TestClaimsExcludeEachOther(t *testing.T) {
	s, db := newStore(t)
	save(t, db, s, numbered(10)...)
	a := claim(t, s, 4)
	b := claim(t, s, 100)
	ra, rb := ids(a.Records()), ids(b.Records())
	if len(ra) != 4 || len(rb) != 6 {
		t.Fatalf("claims took %v and %v; want 4 and the other 6", ra, rb)
	}
	for _, id := range ra {
		if slices.Contains(rb, id) {
			t.Fatalf("row %d claimed twice: %v and %v", id, ra, rb)
		}
	}
	if err := a.Rollback(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	c := claim(t, s, 100)
	if got := ids(c.Records()); !slices.Equal(got, ra) {
		t.Fatalf("after a rollback the next claim took %v, want the rolled-back rows %v", got, ra)
	}
	_ = c.Rollback(ctxT(t))
	_ = b.Rollback(ctxT(t))
}

// Commit deletes published rows, gives failed rows one attempt more, their error and a
// backoff during which they are not claimed, and leaves the others as they were.
func TestCommitOutcome(t *testing.T) {
	s, db := newStore(t)
	ctx := ctxT(t)
	save(t, db, s, &transport.Message{Queue: "q", Body: []byte("1")}, &transport.Message{Queue: "q", Body: []byte("2")}, &transport.Message{Queue: "q", Body: []byte("3")})
	c := claim(t, s, 10)
	r := ids(c.Records())
	if err := c.Commit(ctx, outbox.Result{Published: []int64{r[0]}, Failed: []outbox.Failure{{ID: r[1], Err: "broker\x00 down \xff", RetryIn: 300 * time.Millisecond}}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Pending(ctx); n != 2 {
		t.Fatalf("%d pending after one published, want 2", n)
	}
	c = claim(t, s, 10)
	if got := ids(c.Records()); !slices.Equal(got, []int64{r[2]}) {
		t.Fatalf("claimed %v during row %d's backoff, want only %d", got, r[1], r[2])
	}
	_ = c.Rollback(ctx)
	var attempts int
	var lastErr string
	if err := db.QueryRowContext(ctx, "SELECT attempts, last_error FROM "+s.Table()+" WHERE id = $1", r[1]).Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || !strings.Contains(lastErr, "broker") {
		t.Fatalf("failed row: attempts %d, last_error %q", attempts, lastErr)
	}
	time.Sleep(350 * time.Millisecond)
	c = claim(t, s, 10)
	recs := c.Records()
	if got := ids(recs); !slices.Equal(got, []int64{r[1], r[2]}) || recs[0].Attempts != 1 {
		t.Fatalf("after the backoff claimed %v (attempts %d), want [%d %d] with 1 attempt", got, recs[0].Attempts, r[1], r[2])
	}
	_ = c.Rollback(ctx)
}

// Per-key order: a keyed row is not claimed while an earlier row of its key is held by
// another claim or waits for its backoff; rows of one key in one claim come in order,
// and other keys are not held up.
func TestPerKeyOrder(t *testing.T) {
	s, db := newStore(t)
	ctx := ctxT(t)
	m := func(key string, n int) *transport.Message {
		msg := &transport.Message{Queue: "q", Body: []byte(fmt.Sprint(n))}
		if key != "-" {
			msg.Key = []byte(key)
		}
		return msg
	}
	save(t, db, s, m("a", 1), m("b", 2), m("a", 3), m("-", 4), m("b", 5), m("", 6), m("a", 7))
	first := claim(t, s, 2) // rows 1 (a) and 2 (b)
	f := ids(first.Records())
	second := claim(t, s, 10)
	got := ids(second.Records())
	if want := []int64{f[0] + 3, f[0] + 5}; !slices.Equal(got, want) {
		t.Fatalf("with a and b held, a second claim took %v; want the unkeyed row and the empty key %v", got, want)
	}
	_ = second.Rollback(ctx)
	// a's head fails (backoff), b's is published: b's next row may go, a's may not.
	if err := first.Commit(ctx, outbox.Result{Published: []int64{f[1]}, Failed: []outbox.Failure{{ID: f[0], Err: "x", RetryIn: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	third := claim(t, s, 10)
	got = ids(third.Records())
	if want := []int64{f[0] + 3, f[0] + 4, f[0] + 5}; !slices.Equal(got, want) {
		t.Fatalf("with a's head in its backoff a claim took %v, want %v", got, want)
	}
	_ = third.Rollback(ctx)
	// Once a's head is due, one claim takes all of a, in order.
	if _, err := db.ExecContext(ctx, "UPDATE "+s.Table()+" SET available_at = now() WHERE id = $1", f[0]); err != nil {
		t.Fatal(err)
	}
	all := claim(t, s, 10)
	got = ids(all.Records())
	if want := []int64{f[0], f[0] + 2, f[0] + 3, f[0] + 4, f[0] + 5, f[0] + 6}; !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	_ = all.Rollback(ctx)
}

// With a retention, published rows stay (published_at set) until Purge deletes them
// once they are older than the retention. The row is aged in the table rather than by
// sleeping, so a slow machine cannot make it expire early.
func TestRetentionAndPurge(t *testing.T) {
	s, db := newStore(t, pgstore.WithRetention(time.Hour))
	ctx := ctxT(t)
	save(t, db, s, &transport.Message{Queue: "q", Body: []byte("1")})
	c := claim(t, s, 10)
	if err := c.Commit(ctx, outbox.Result{Published: ids(c.Records())}); err != nil {
		t.Fatal(err)
	}
	count := func() (n int) {
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+s.Table()+" WHERE published_at IS NOT NULL").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if count() != 1 {
		t.Fatal("the published row was not kept")
	}
	if n, _ := s.Pending(ctx); n != 0 {
		t.Fatalf("a kept published row counts as pending: %d", n)
	}
	if c := claim(t, s, 10); len(c.Records()) != 0 {
		t.Fatal("a published row was claimed again")
	} else {
		_ = c.Rollback(ctx)
	}
	if n, err := s.Purge(ctx); err != nil || n != 0 || count() != 1 {
		t.Fatalf("Purge within the retention: %d, %v", n, err)
	}
	if _, err := db.ExecContext(ctx, "UPDATE "+s.Table()+" SET published_at = published_at - interval '61 minutes'"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Purge(ctx); err != nil || n != 1 || count() != 0 {
		t.Fatalf("Purge after the retention: %d, %v", n, err)
	}
}

// Migrate runs again (and concurrently) without harm; Schema prints the same DDL.
func TestMigrateIdempotent(t *testing.T) {
	s, db := newStore(t)
	ctx := ctxT(t)
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- s.Migrate(ctx) }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ddl, err := pgstore.Schema(s.Table())
	if err != nil || !strings.Contains(ddl, "CREATE TABLE IF NOT EXISTS "+s.Table()+" (") {
		t.Fatalf("Schema: %v\n%s", err, ddl)
	}
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		t.Fatalf("the printed schema does not apply: %v", err)
	}
}

// Saving many messages at once (more than one insert statement) keeps their order.
func TestSaveMany(t *testing.T) {
	s, db := newStore(t)
	recs := saveAndClaimAll(t, db, s, numbered(2500))
	for i, r := range recs {
		if string(r.Message.Body) != fmt.Sprint(i) {
			t.Fatalf("row %d holds %q", i, r.Message.Body)
		}
	}
}

// Example applies the migration printed by Schema.
func ExampleSchema() {
	ddl, _ := pgstore.Schema("bq_outbox")
	fmt.Println(strings.Split(ddl, "\n")[3])
	// Output: CREATE TABLE IF NOT EXISTS bq_outbox (
}

// A claim lets go of the rows it dropped for their key's order: once the key's earlier
// row is published, a third claim takes them while the second claim is still open.
func TestDroppedRowsAreNotHeld(t *testing.T) {
	s, db := newStore(t)
	ctx := ctxT(t)
	save(t, db, s,
		&transport.Message{Queue: "q", Body: []byte("a1"), Key: []byte("a")},
		&transport.Message{Queue: "q", Body: []byte("a2"), Key: []byte("a")},
		&transport.Message{Queue: "q", Body: []byte("b1"), Key: []byte("b")})
	a := claim(t, s, 1)
	ra := ids(a.Records())
	b := claim(t, s, 10)
	if got := ids(b.Records()); !slices.Equal(got, []int64{ra[0] + 2}) {
		t.Fatalf("second claim took %v, want only b1 (a2 waits for a1)", got)
	}
	defer b.Rollback(ctx)
	if err := a.Commit(ctx, outbox.Result{Published: ra}); err != nil {
		t.Fatal(err)
	}
	c := claim(t, s, 10)
	defer c.Rollback(ctx)
	if got := ids(c.Records()); !slices.Equal(got, []int64{ra[0] + 1}) {
		t.Fatalf("third claim took %v, want a2, which the open second claim must not hold", got)
	}
}

// The context of Claim bounds the call, not the claim: a claim whose context has ended
// still commits (database/sql would roll back a transaction begun with that context).
func TestClaimOutlivesItsContext(t *testing.T) {
	s, db := newStore(t)
	save(t, db, s, &transport.Message{Queue: "q", Body: []byte("1")})
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	c, err := s.Claim(cctx, 10)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let database/sql notice the ended context
	if err := c.Commit(ctxT(t), outbox.Result{Published: ids(c.Records())}); err != nil {
		t.Fatalf("Commit after Claim's context ended: %v", err)
	}
	if n, _ := s.Pending(ctxT(t)); n != 0 {
		t.Fatalf("%d pending, want 0", n)
	}
}
