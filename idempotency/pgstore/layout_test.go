package pgstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
	"github.com/babelqueue-go/babelqueue/idempotency/pgstore"
)

// The other SDKs' workers read and write the same rows. Their statements, as their
// stores send them (the Go reference SDK's idempotency-postgres, the PHP SDK's
// PdoStore), run here on a plain connection: what they write, this store reads as they
// mean it, and what this store writes, they read as this store means it.

func exec(t *testing.T, db *sql.DB, query string, args ...any) int64 {
	t.Helper()
	res, err := db.ExecContext(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	n, _ := res.RowsAffected()
	return n
}

func TestReferenceLayout(t *testing.T) {
	ctx := context.Background()
	db := rawDB(t)
	s := newStore(t, pgstore.LayoutReference)
	table := s.Table()
	// The reference's statements.
	refClaim := func(id string, ttl string) bool { // Claim/Remember: true iff this call wrote the row
		var got string
		err := db.QueryRowContext(ctx, `INSERT INTO `+table+` (message_id, created_at, expires_at) VALUES ($1, now(), `+ttl+`)
ON CONFLICT (message_id) DO UPDATE SET created_at = now(), expires_at = EXCLUDED.expires_at
WHERE `+table+`.expires_at IS NOT NULL AND `+table+`.expires_at <= now() RETURNING message_id`, id).Scan(&got)
		if errors.Is(err, sql.ErrNoRows) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true
	}
	refSeen := func(id string) bool {
		var one int
		err := db.QueryRowContext(ctx, `SELECT 1 FROM `+table+` WHERE message_id = $1 AND (expires_at IS NULL OR expires_at > now())`, id).Scan(&one)
		return err == nil
	}

	t.Run("an id the reference remembered is remembered here", func(t *testing.T) {
		for _, ttl := range []string{"NULL", "now() + interval '1 hour'"} {
			id := idempotencytest.NewID()
			if !refClaim(id, ttl) {
				t.Fatal("the reference's insert did not write")
			}
			idempotencytest.WantSeen(t, s, id, true)
			idempotencytest.WantClaim(t, s, id, idempotency.Remembered)
		}
	})
	t.Run("an id whose reference row lapsed is free here", func(t *testing.T) {
		id := idempotencytest.NewID()
		exec(t, db, `INSERT INTO `+table+` (message_id, expires_at) VALUES ($1, now() - interval '1 second')`, id)
		idempotencytest.WantSeen(t, s, id, false)
		idempotencytest.WantClaim(t, s, id, idempotency.Claimed)
	})
	t.Run("what this store remembers the reference reads as remembered and does not take", func(t *testing.T) {
		id := idempotencytest.NewID()
		if err := s.Remember(ctx, id); err != nil {
			t.Fatal(err)
		}
		if !refSeen(id) {
			t.Fatal("the reference's Seen does not find the row")
		}
		if refClaim(id, "NULL") {
			t.Fatal("the reference's claim took a remembered id")
		}
	})
	t.Run("a claim is a row the reference reads as remembered until the lease lapses", func(t *testing.T) {
		id := idempotencytest.NewID()
		c, err := s.Claim(ctx, id, 300*time.Millisecond)
		if err != nil || c.Status != idempotency.Claimed {
			t.Fatalf("Claim = %+v, %v", c, err)
		}
		if !refSeen(id) || refClaim(id, "NULL") {
			t.Fatal("the reference does not read a live claim as remembered")
		}
		time.Sleep(400 * time.Millisecond)
		if refSeen(id) || !refClaim(id, "NULL") {
			t.Fatal("the reference does not take over a lapsed claim")
		}
		// The reference's row now; the stale claim_token no longer makes it a claim.
		idempotencytest.WantSeen(t, s, id, true)
		idempotencytest.WantClaim(t, s, id, idempotency.Remembered)
	})
	t.Run("Migrate adds claim_token to a table the reference created", func(t *testing.T) {
		legacy := tables[pgstore.LayoutReference] + "_legacy"
		t.Cleanup(func() { exec(t, db, `DROP TABLE IF EXISTS `+legacy) })
		exec(t, db, `CREATE TABLE `+legacy+` (
    message_id  TEXT        NOT NULL PRIMARY KEY,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NULL)`)
		exec(t, db, `INSERT INTO `+legacy+` (message_id) VALUES ('before-migrate')`)
		s2, err := pgstore.New(ctx, pgURL(t), pgstore.WithTable(legacy))
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		if err := s2.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s2.Migrate(ctx); err != nil {
			t.Fatalf("a second Migrate: %v", err)
		}
		idempotencytest.WantSeen(t, s2, "before-migrate", true)
		idempotencytest.WantClaim(t, s2, idempotencytest.NewID(), idempotency.Claimed)
	})
}

func TestPHPLayout(t *testing.T) {
	ctx := context.Background()
	db := rawDB(t)
	s := newStore(t, pgstore.LayoutPHP)
	table := s.Table()
	now := func() int64 { return time.Now().Unix() }
	// The PHP store's statements.
	phpSeen := func(id string) bool {
		var state string
		_ = db.QueryRowContext(ctx, `SELECT state FROM `+table+` WHERE message_id = $1`, id).Scan(&state)
		return state == "seen"
	}
	phpClaim := func(id string, ttl int64) bool {
		exp := now() + ttl
		if _, err := db.ExecContext(ctx, `INSERT INTO `+table+` (message_id, state, expires_at) VALUES ($1, 'claimed', $2)`, id, exp); err == nil {
			return true
		} else if !strings.Contains(err.Error(), "23505") { // unique_violation: the row exists
			t.Fatal(err)
		}
		return exec(t, db, `UPDATE `+table+` SET expires_at = $1 WHERE message_id = $2 AND state = 'claimed'
  AND expires_at IS NOT NULL AND expires_at < $3`, exp, id, now()) == 1
	}
	phpRemember := func(id string) {
		if exec(t, db, `UPDATE `+table+` SET state = 'seen', expires_at = NULL WHERE message_id = $1`, id) == 0 {
			exec(t, db, `INSERT INTO `+table+` (message_id, state, expires_at) VALUES ($1, 'seen', NULL)`, id)
		}
	}

	t.Run("a PHP worker's claim holds this store's workers off until it commits", func(t *testing.T) {
		id := idempotencytest.NewID()
		if !phpClaim(id, 3600) {
			t.Fatal("PHP's claim failed on a fresh id")
		}
		c := idempotencytest.WantClaim(t, s, id, idempotency.Held)
		if c.Remaining < 59*time.Minute || c.Remaining > time.Hour+time.Second {
			t.Fatalf("Remaining = %s, want the PHP claim's hour", c.Remaining)
		}
		idempotencytest.WantSeen(t, s, id, false)
		phpRemember(id)
		idempotencytest.WantSeen(t, s, id, true)
		idempotencytest.WantClaim(t, s, id, idempotency.Remembered)
	})
	t.Run("this store's claim parks a PHP worker; its remember is PHP's seen", func(t *testing.T) {
		id := idempotencytest.NewID()
		c := idempotencytest.WantClaim(t, s, id, idempotency.Claimed)
		if phpSeen(id) || phpClaim(id, 3600) {
			t.Fatal("PHP reads this store's live claim as free or committed")
		}
		if err := s.Remember(ctx, id); err != nil {
			t.Fatal(err)
		}
		var exp sql.NullInt64
		if err := db.QueryRowContext(ctx, `SELECT expires_at FROM `+table+` WHERE message_id = $1`, id).Scan(&exp); err != nil || exp.Valid {
			t.Fatalf("expires_at = %v, %v; want NULL, as PHP commits", exp, err)
		}
		if !phpSeen(id) {
			t.Fatal("PHP's seen() is false after Remember")
		}
		if err := s.Release(ctx, id, c.Token); err != nil {
			t.Fatal(err)
		}
		if !phpSeen(id) {
			t.Fatal("a late Release dropped the committed row")
		}
	})
	t.Run("lapsed claims are taken over both ways", func(t *testing.T) {
		id := idempotencytest.NewID()
		exec(t, db, `INSERT INTO `+table+` (message_id, state, expires_at) VALUES ($1, 'claimed', $2)`, id, now()-5)
		idempotencytest.WantClaim(t, s, id, idempotency.Claimed)

		id2 := idempotencytest.NewID()
		if c, err := s.Claim(ctx, id2, time.Second); err != nil || c.Status != idempotency.Claimed {
			t.Fatalf("Claim = %+v, %v", c, err)
		}
		if phpClaim(id2, 3600) {
			t.Fatal("PHP took over a live claim")
		}
		time.Sleep(2100 * time.Millisecond) // whole seconds: lapsed once expires_at < now
		if !phpClaim(id2, 3600) {
			t.Fatal("PHP did not take over this store's lapsed claim")
		}
	})
}

func TestMigration(t *testing.T) {
	for _, l := range []pgstore.Layout{pgstore.LayoutReference, pgstore.LayoutPHP} {
		sql, err := pgstore.Migration(pgstore.WithLayout(l), pgstore.WithTable("app.dedupe"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"CREATE TABLE IF NOT EXISTS app.dedupe (", "message_id", "expires_at",
			"CREATE INDEX IF NOT EXISTS dedupe_expires_at_idx ON app.dedupe (expires_at);"} {
			if !strings.Contains(sql, want) {
				t.Errorf("%s migration lacks %q:\n%s", l, want, sql)
			}
		}
	}
}
