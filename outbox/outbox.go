// Package outbox is the transactional outbox: a message is written into the
// application's database in the same transaction as the business rows, and a relay
// publishes it afterwards, marking it published only once the broker confirmed it.
//
// A service that updates a row and then publishes a message makes two writes to two
// systems; a crash between them loses one of them. With the outbox the message is a row
// of the same database transaction: it commits or rolls back with the business data.
//
//	w := outbox.NewWriter(app, store)
//	tx, _ := db.BeginTx(ctx, nil)
//	_, _ = tx.ExecContext(ctx, `UPDATE orders SET state = 'paid' WHERE id = $1`, 1042)
//	_, _ = w.Write(ctx, tx, "urn:babel:orders:paid", order, babelqueue.WithKey([]byte("1042")))
//	_ = tx.Commit()
//
// [Writer.Write] runs everything [babelqueue.App.Publish] runs (the envelope, the
// options, the publish middleware) through [babelqueue.App.Prepare] and stores the
// message the transport would have been given: the encoded envelope, the queue, the
// record key (nil is no key, empty is an empty key), the out-of-band headers (a
// traceparent) and the projected envelope fields. The [Relay] publishes exactly that.
//
// # Delivery
//
// The relay claims a batch of due rows, publishes them with
// [transport.PublishConfirmed] (a Kafka produce awaited for its acknowledgement, a
// RabbitMQ publisher confirm, a Redis reply) and only then marks them published, in the
// same store transaction that claimed them. A row the broker did not confirm gets one
// more attempt and a backoff, and is retried. A relay that dies between the broker's
// confirm and the mark publishes its batch again when it (or another relay) next claims
// it: delivery is at least once, with at most the batch in flight duplicated, and
// consumers dedupe on meta.id (package idempotency).
//
// Rows of one record key are published in the order they were written: a keyed row is
// not claimed while an earlier unpublished row of the same key exists outside the
// claim, and a batch is published in order.
//
// # Stores
//
// A [Store] keeps the rows. Package outbox/pgstore is the PostgreSQL store (several
// relays share its table with FOR UPDATE SKIP LOCKED); [MemoryStore] is an in-process
// store for tests.
package outbox

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
)

// Store keeps outbox rows. Implementations are safe for concurrent use.
type Store interface {
	// Save stores msgs, in order, as new rows inside tx, the caller's transaction: they
	// become visible to the relay when tx commits and vanish if it rolls back. Each
	// message is stored exactly (body, queue, key with nil kept apart from empty,
	// headers, projection).
	Save(ctx context.Context, tx *sql.Tx, msgs ...*transport.Message) error

	// Claim takes up to limit rows that are due, oldest first, and holds them until the
	// claim ends, so no other claim takes them meanwhile. A keyed row is claimed only
	// when every earlier unpublished row of its key is in the same claim. An empty
	// claim (no records) must still be ended. ctx bounds the call, not the claim: the
	// claim lasts until its Commit or Rollback.
	Claim(ctx context.Context, limit int) (Claim, error)
}

// Claim is a batch of rows a relay holds. Exactly one of Commit and Rollback ends it.
type Claim interface {
	// Records returns the claimed rows, oldest first.
	Records() []Record
	// Commit records the outcome and ends the claim: published rows are removed or kept
	// as published (the store's retention), failed rows get one attempt more and are
	// due again after their RetryIn; rows in neither list are left as they were.
	Commit(ctx context.Context, r Result) error
	// Rollback ends the claim and leaves every row as it was.
	Rollback(ctx context.Context) error
}

// Record is one claimed outbox row.
type Record struct {
	// ID is the store's row id; it grows in the order rows were written.
	ID int64
	// Message is what the relay publishes, exactly as [Writer.Write] stored it.
	Message *transport.Message
	// Attempts counts the earlier publishes of this row that were not confirmed.
	Attempts int
}

// Result is what a relay tells a [Claim] when it commits it.
type Result struct {
	// Published are the ids of rows the broker confirmed.
	Published []int64
	// Failed are the rows the broker did not confirm.
	Failed []Failure
}

// Failure is a row whose publish was not confirmed.
type Failure struct {
	// ID is the row's id.
	ID int64
	// Err says why, in a line (it never holds credentials).
	Err string
	// RetryIn is how long the row waits before it is due again.
	RetryIn time.Duration
}

// Purger is implemented by stores that keep published rows for a retention period:
// Purge deletes the published rows older than it and returns how many it deleted. The
// relay calls it now and then (see [WithPurgeInterval]).
type Purger interface {
	Purge(ctx context.Context) (int64, error)
}

// Counter is implemented by stores that can count the rows not yet published; the
// relay's [Relay.Pending] and the CLI's progress line use it.
type Counter interface {
	Pending(ctx context.Context) (int64, error)
}

// ErrNoStore is returned by [Writer.Write] on a Writer without a store or app.
var ErrNoStore = errors.New("outbox: writer has no store or no app")

// ErrNoTable matches the error of a store whose table does not exist: the migration
// was never applied (pgstore's Store.Migrate, `babelqueue outbox migrate`). A relay
// says so once, with the command, and keeps trying, so it starts working as soon as
// the table is made.
var ErrNoTable = errors.New("outbox: the outbox table does not exist")

// Writer writes messages into the outbox inside the caller's transactions.
type Writer struct {
	app   *babelqueue.App
	store Store
}

// NewWriter returns a writer that prepares messages with app (its queue, its publish
// middleware) and stores them in store.
func NewWriter(app *babelqueue.App, store Store) *Writer {
	return &Writer{app: app, store: store}
}

// Write prepares the message [babelqueue.App.Publish] would send for urn and data, with
// the same options (ToQueue, WithKey, WithHeaders, ContinueTrace) and publish middleware,
// and stores it in tx. It returns the message's meta.id. Nothing is published: the
// relay publishes the row once tx committed, and never if tx rolls back.
func (w *Writer) Write(ctx context.Context, tx *sql.Tx, urn string, data any, opts ...babelqueue.PublishOption) (string, error) {
	if w == nil || w.app == nil || w.store == nil {
		return "", ErrNoStore
	}
	m, err := w.app.Prepare(ctx, urn, data, opts...)
	if err != nil {
		return "", err
	}
	if err := w.store.Save(ctx, tx, m); err != nil {
		return "", err
	}
	return m.Projection.MessageID, nil
}
