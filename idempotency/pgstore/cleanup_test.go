package pgstore_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
	"github.com/babelqueue-go/babelqueue/idempotency/pgstore"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func rowsOf(t *testing.T, s *pgstore.Store, ids []string) int {
	t.Helper()
	var n int
	if err := rawDB(t).QueryRowContext(context.Background(),
		`SELECT count(*) FROM `+s.Table()+` WHERE message_id = ANY($1)`, ids).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// DeleteExpired deletes lapsed remembered ids and claims, and leaves live ones.
func TestDeleteExpired(t *testing.T) {
	for _, layout := range []pgstore.Layout{pgstore.LayoutReference, pgstore.LayoutPHP} {
		t.Run(layout.String(), func(t *testing.T) {
			ctx := context.Background()
			s := newStore(t, layout, pgstore.WithTTL(time.Second))
			var lapsing []string
			for range 3 {
				id := idempotencytest.NewID()
				if err := s.Remember(ctx, id); err != nil {
					t.Fatal(err)
				}
				lapsing = append(lapsing, id)
			}
			claimed := idempotencytest.NewID()
			if _, err := s.Claim(ctx, claimed, time.Second); err != nil {
				t.Fatal(err)
			}
			lapsing = append(lapsing, claimed)
			live := idempotencytest.NewID()
			if _, err := s.Claim(ctx, live, time.Hour); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2100 * time.Millisecond)
			n, err := s.DeleteExpired(ctx)
			if err != nil || n < 4 {
				t.Fatalf("DeleteExpired = %d, %v; want at least the 4 lapsed rows", n, err)
			}
			if got := rowsOf(t, s, lapsing); got != 0 {
				t.Fatalf("%d lapsed rows left", got)
			}
			if got := rowsOf(t, s, []string{live}); got != 1 {
				t.Fatal("DeleteExpired deleted a live claim")
			}
		})
	}
}

// RunCleanup deletes lapsed rows on its ticker, survives a database that does not
// answer (it logs and tries again), and returns nil when its context ends.
func TestRunCleanup(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, pgstore.LayoutReference, pgstore.WithTTL(100*time.Millisecond))
	id := idempotencytest.NewID()
	if err := s.Remember(ctx, id); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.RunCleanup(runCtx, 50*time.Millisecond) }()
	deadline := time.Now().Add(10 * time.Second)
	for rowsOf(t, s, []string{id}) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("RunCleanup did not delete the lapsed row within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("RunCleanup returned %v, want nil", err)
	}

	logs := &transporttest.LogBuffer{}
	away, err := pgstore.NewFromDB(rawDBAt(t, "postgres://u:p@127.0.0.1:1/db?sslmode=disable&connect_timeout=1"),
		pgstore.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop = context.WithCancel(ctx)
	go func() { done <- away.RunCleanup(runCtx, 50*time.Millisecond) }()
	deadline = time.Now().Add(10 * time.Second)
	for strings.Count(logs.String(), "deleting lapsed idempotency rows failed") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("RunCleanup did not log two failed passes; logs:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("RunCleanup returned %v, want nil", err)
	}
}
