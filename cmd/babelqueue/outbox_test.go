package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/outbox/pgstore"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func TestOutboxCommandErrors(t *testing.T) {
	t.Setenv("BQ_OUTBOX_DB", "")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"outbox"}, 2, "needs a subcommand"},
		{[]string{"outbox", "frob"}, 2, "unknown outbox subcommand"},
		{[]string{"outbox", "relay", "memory://"}, 2, "-db (or $BQ_OUTBOX_DB) is required"},
		{[]string{"outbox", "relay", "-db", "postgres://x@127.0.0.1:1/x"}, 2, "want exactly one broker URL"},
		{[]string{"outbox", "relay", "-db", "postgres://x@127.0.0.1:1/x", "-batch", "0", "memory://"}, 2, "-batch and -poll must be positive"},
		{[]string{"outbox", "relay", "-db", "postgres://x@127.0.0.1:1/x", "-grace", "0s", "memory://"}, 2, "-grace must be positive"},
		{[]string{"outbox", "schema", "-table", "Robert'); DROP TABLE students;--"}, 2, "lower-case identifier"},
		{[]string{"outbox", "migrate", "-db", "postgres://bob:hunter2@127.0.0.1:1/x?connect_timeout=2"}, 1, "outbox database"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		all := out.String() + errb.String()
		if code != tc.code || !strings.Contains(all, tc.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d containing %q", tc.args, code, all, tc.code, tc.want)
		}
		if strings.Contains(all, "hunter2") {
			t.Errorf("%v: output shows the password: %s", tc.args, all)
		}
	}
}

func TestOutboxSchemaPrintsMigration(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"outbox", "schema", "-table", "app.outbox"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "CREATE TABLE IF NOT EXISTS app.outbox (") || !strings.Contains(out.String(), "outbox_pending ON app.outbox") {
		t.Fatalf("schema printed:\n%s", out.String())
	}
}

// migrate creates the table; relay -drain publishes every committed row to Redis with
// a progress line, and says what it did.
func TestOutboxRelayCommand(t *testing.T) {
	dsn := transporttest.BrokerURL(t, "BQ_POSTGRES_URL", "postgres")
	redisURL := transporttest.BrokerURL(t, "BQ_REDIS_URL", "redis")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	table := "bqtest_cli_" + transporttest.UniqueName("t")[2:]
	queue := transporttest.UniqueName("outboxtest-cli")
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })

	var out, errb bytes.Buffer
	if code := run(ctx, []string{"outbox", "migrate", "-db", dsn, "-table", table}, &out, &errb); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, errb.String())
	}

	store, err := pgstore.New(db, pgstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	app, err := babelqueue.New(memory.New(), babelqueue.WithQueue(queue))
	if err != nil {
		t.Fatal(err)
	}
	w := outbox.NewWriter(app, store)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 250
	for i := range n {
		if _, err := w.Write(ctx, tx, "urn:babel:cli:test", map[string]int{"n": i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	out.Reset()
	errb.Reset()
	code := run(ctx, []string{"outbox", "relay", "-db", dsn, "-table", table, "-batch", "10", "-progress", "1ms", "-drain", redisURL}, &out, &errb)
	if code != 0 {
		t.Fatalf("relay: exit %d: %s%s", code, out.String(), errb.String())
	}
	if s := out.String(); !strings.Contains(s, fmt.Sprintf("outbox relay: published %d row(s), 0 publish(es) not confirmed, 0 pending", n)) ||
		!strings.Contains(s, "/s), 0 not confirmed,") {
		t.Fatalf("relay output has no progress line or summary:\n%s", s)
	}

	tr, err := transport.Open(ctx, redisURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	t.Cleanup(func() { cleanQueue(tr, queue) }) // runs first: what a failed run left
	c, err := tr.Consume(ctx, queue, transport.ConsumeOptions{Prefetch: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for i := range n {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		d, err := c.Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("message %d of %d: %v", i, n, err)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	transporttest.ExpectNothing(t, c, 500*time.Millisecond)
}

// cleanQueue drains what a failed test left on queue.
func cleanQueue(tr transport.Transport, queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := tr.Consume(ctx, queue, transport.ConsumeOptions{Prefetch: 64})
	if err != nil {
		return
	}
	defer c.Close(ctx)
	for {
		rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		d, err := c.Receive(rctx)
		rcancel()
		if err != nil {
			return
		}
		_ = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack})
	}
}
