package pgstore_test

import (
	"context"
	"database/sql"
	"log/slog"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/outbox/pgstore"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// pgURL returns $BQ_POSTGRES_URL once PostgreSQL answers there; under CI=true a missing
// or silent database fails the test, elsewhere it skips it.
func pgURL(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("BQ_POSTGRES_URL")
	if dsn == "" {
		brokerproc.Require(t, "BQ_POSTGRES_URL is not set: run `bash scripts/brokers.sh up postgres` and `eval \"$(bash scripts/brokers.sh env)\"`")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("open PostgreSQL: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		brokerproc.Require(t, "PostgreSQL at BQ_POSTGRES_URL does not answer (%v): run `bash scripts/brokers.sh up postgres`", err)
	}
	return dsn
}

// openDB opens a pool on dsn that the test closes.
func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newStore migrates a table of its own for the test (dropped at the end) and returns a
// store on it, with the pool it uses.
func newStore(t testing.TB, opts ...pgstore.Option) (*pgstore.Store, *sql.DB) {
	t.Helper()
	dsn := pgURL(t)
	db := openDB(t, dsn)
	table := "bqtest_outbox_" + transporttest.UniqueName("t")[2:]
	s, err := pgstore.New(db, append([]pgstore.Option{pgstore.WithTable(table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin, err := sql.Open("pgx", dsn)
		if err != nil {
			return
		}
		defer admin.Close()
		_, _ = admin.Exec("DROP TABLE IF EXISTS " + table)
	})
	return s, db
}

// ctxT is a context that ends with the test (or after two minutes).
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t testing.TB) *slog.Logger { return brokerproc.TestLogger(t, slog.LevelWarn) }
