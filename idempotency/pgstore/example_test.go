package pgstore_test

import (
	"fmt"

	"github.com/babelqueue-go/babelqueue/idempotency/pgstore"
)

// The migration of the default layout, to apply with a migration tool of your own
// (or call Store.Migrate at start-up).
func ExampleMigration() {
	sql, err := pgstore.Migration()
	if err != nil {
		panic(err)
	}
	fmt.Print(sql)
	// Output:
	// CREATE TABLE IF NOT EXISTS babelqueue_idempotency (
	//     message_id  TEXT        NOT NULL PRIMARY KEY,
	//     created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
	//     expires_at  TIMESTAMPTZ NULL,
	//     claim_token TEXT        NULL
	// );
	//
	// ALTER TABLE babelqueue_idempotency ADD COLUMN IF NOT EXISTS claim_token TEXT NULL;
	//
	// CREATE INDEX IF NOT EXISTS babelqueue_idempotency_expires_at_idx ON babelqueue_idempotency (expires_at);
}

// The PHP SDK's table, for a Go worker that shares its store with PHP workers.
func ExampleMigration_php() {
	sql, err := pgstore.Migration(pgstore.WithLayout(pgstore.LayoutPHP))
	if err != nil {
		panic(err)
	}
	fmt.Print(sql)
	// Output:
	// CREATE TABLE IF NOT EXISTS bq_idempotency (
	//     message_id VARCHAR(255) NOT NULL,
	//     state      VARCHAR(16)  NOT NULL,
	//     expires_at BIGINT       NULL,
	//     PRIMARY KEY (message_id)
	// );
	//
	// CREATE INDEX IF NOT EXISTS bq_idempotency_expires_at_idx ON bq_idempotency (expires_at);
}
