package pgstore_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
	"github.com/babelqueue-go/babelqueue/idempotency/pgstore"
)

// statements counts the statements pgx runs, and the statements it prepares (once per
// connection and statement, cached after).
type statements struct{ queries, prepares atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.queries.Add(1)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statements) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	s.prepares.Add(1)
	return ctx
}

func (s *statements) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// The middleware runs one statement per phase in either mode: the claim (or the check)
// before the handler, the remember after.
func TestStatementsPerMessage(t *testing.T) {
	const n = 200
	newStore(t, pgstore.LayoutReference) // migrated
	for _, mode := range []idempotency.Mode{idempotency.ModeClaim, idempotency.ModeSeenSet} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg, err := pgx.ParseConfig(pgURL(t))
			if err != nil {
				t.Fatal(err)
			}
			count := &statements{}
			cfg.Tracer = count
			db := stdlib.OpenDB(*cfg)
			t.Cleanup(func() { _ = db.Close() })
			s, err := pgstore.NewFromDB(db, pgstore.WithTable(tables[pgstore.LayoutReference]))
			if err != nil {
				t.Fatal(err)
			}
			idempotencytest.RunMessages(t, s, mode, 5) // prepares the statements
			count.queries.Store(0)
			count.prepares.Store(0)
			idempotencytest.RunMessages(t, s, mode, n)
			if got := count.queries.Load(); got != 2*n {
				t.Fatalf("%d statements for %d messages (%.2f each), want 2 each", got, n, float64(got)/n)
			}
			if p := count.prepares.Load(); p > 4 {
				t.Fatalf("%d statements prepared after the warm-up, want them cached", p)
			}
		})
	}
}
