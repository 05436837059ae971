package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/outbox/pgstore"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestSecureOutbox: the whole path over TLS: a message written into the secure
// PostgreSQL (postgres-tls: TLS only, a password user) in the business transaction,
// relayed to the secure Redis (redis-tls: TLS, client certificate, ACL user), received
// there byte for byte.
func TestSecureOutbox(t *testing.T) {
	dsn := transporttest.BrokerURL(t, "BQ_POSTGRES_TLS_URL", "postgres-tls")
	redisURL := transporttest.BrokerURL(t, "BQ_REDIS_TLS_URL", "redis-tls")
	ctx := ctxT(t)
	db := openDB(t, dsn)
	table := "bqsec_outbox_" + transporttest.UniqueName("t")[2:]
	store, err := pgstore.New(db, pgstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })

	q := transporttest.UniqueName("bqsec")
	app, err := babelqueue.Open(ctx, redisURL, babelqueue.WithQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := outbox.NewWriter(app, store).Write(ctx, tx, "urn:babel:orders:created", map[string]int{"order_id": 42})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	res, err := outbox.NewRelay(store, app.Transport()).Drain(ctx)
	if err != nil || res.Published != 1 {
		t.Fatalf("Drain: %+v, %v; want 1 published", res, err)
	}
	c, err := app.Transport().Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	d, err := c.Receive(rctx)
	if err != nil {
		t.Fatalf("the relayed message did not arrive: %v", err)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(d.Body), `"id":"`+id+`"`) || !strings.Contains(string(d.Body), `"order_id":42`) {
		t.Errorf("received %s, want message %s", d.Body, id)
	}
}
