// Package pgstore is an [idempotency.ClaimStore] in a PostgreSQL table, for a fleet of
// workers that dedupe on meta.id together, with Go workers and workers of the other
// BabelQueue SDKs on the same database.
//
//	store, err := pgstore.New(ctx, "postgres://app@db/app", pgstore.WithTTL(7*24*time.Hour))
//	if err := store.Migrate(ctx); err != nil { … } // or apply store.Migration() with your tool
//	dedupe, err := idempotency.Middleware(store)
//	app.Use(dedupe)
//	go store.RunCleanup(ctx, time.Hour) // drops lapsed rows
//
// It runs on database/sql over pgx v5's stdlib driver: [New] opens a pool on a DSN,
// and [NewFromDB] takes the *sql.DB an application already has (a pgxpool converts with
// stdlib.OpenDBFromPool). database/sql keeps the store usable with any pool the
// application configured, and pgx's statement cache behind it makes each store call
// one prepared statement, one round trip.
//
// # Layout
//
// One row per message id, the id in message_id byte for byte (its primary key is what
// makes a claim atomic). Two layouts, an option because the two SDKs that have an SQL
// store disagree:
//
// [LayoutReference] (the default) is the table of the public Go reference SDK's
// idempotency-postgres, with one nullable column added for claims (the reference has
// none; adding a nullable column leaves its statements working):
//
//	CREATE TABLE babelqueue_idempotency (
//	    message_id  TEXT        NOT NULL PRIMARY KEY,
//	    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
//	    expires_at  TIMESTAMPTZ NULL,     -- NULL: never; a row at or past it is absent
//	    claim_token TEXT        NULL      -- added here: NULL for a remembered id
//	);
//
// A claim is a live row with expires_at = now() + lease and claim_token = a random
// token, "@", and that expires_at in Unix microseconds. Every other live row is a
// remembered id: the reference's rows (claim_token NULL), and a lapsed claim a reference
// worker took over (it rewrites expires_at and leaves claim_token, which then no longer
// matches). The reference reads any live row as remembered, so a reference worker
// acknowledges its duplicate while this store's claimer runs the message, and takes
// over a claim whose lease lapsed, as this store does.
//
// [LayoutPHP] is the PHP SDK's PdoStore table:
//
//	CREATE TABLE bq_idempotency (
//	    message_id VARCHAR(255) NOT NULL PRIMARY KEY,
//	    state      VARCHAR(16)  NOT NULL,  -- 'claimed' or 'seen'
//	    expires_at BIGINT       NULL       -- Unix seconds; NULL: never
//	);
//
// A claim is state 'claimed' with expires_at = now + lease in whole seconds (rounded
// up), lapsing once expires_at is in the past, as PHP decides; a remembered id is
// state 'seen', with expires_at NULL as PHP writes it, or now + TTL when this store has
// a TTL (PHP keeps reading such a row as seen until it is deleted). ids longer than 255
// characters do not fit this layout.
//
// All times are the database's clock (now()), never the workers'.
//
// # Statements
//
// Claim is one statement: an INSERT … ON CONFLICT DO UPDATE that takes a free or
// lapsed row, and in the same statement reads the row it could not take (remembered, or
// held and for how long). Remember is one upsert, Seen one SELECT, Release and Forget
// one DELETE each; the middleware makes one statement before the handler and one after.
// [Store.DeleteExpired] deletes lapsed rows in batches; [Store.RunCleanup] calls it on
// a ticker.
package pgstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/idempotency"
)

// Layout is the table layout: [idempotency.LayoutReference] (the default) or
// [idempotency.LayoutPHP]; see the package documentation.
type Layout = idempotency.Layout

// The layouts, as this package's names.
const (
	LayoutReference = idempotency.LayoutReference
	LayoutPHP       = idempotency.LayoutPHP
)

// The default table names of the layouts.
const (
	ReferenceTable = "babelqueue_idempotency"
	PHPTable       = "bq_idempotency"
)

// Option configures a [Store].
type Option func(*config)

type config struct {
	layout Layout
	table  string
	ttl    time.Duration
	log    *slog.Logger
	errs   []error
}

func (c *config) invalid(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: pgstore: "+format, append([]any{babelqueue.ErrInvalidOption}, args...)...))
}

// WithLayout chooses the table layout (default [LayoutReference]).
func WithLayout(l Layout) Option {
	return func(c *config) {
		if l != LayoutReference && l != LayoutPHP {
			c.invalid("layout %d", int(l))
			return
		}
		c.layout = l
	}
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// WithTable replaces the layout's table name ([ReferenceTable], [PHPTable]); it may
// be schema-qualified ("queues.idempotency"). It is written into the SQL as it is, so
// it must be a plain identifier: letters, digits and underscores.
func WithTable(name string) Option {
	return func(c *config) {
		if !identifier.MatchString(name) {
			c.invalid("table name %q (want [schema.]name of letters, digits and underscores)", name)
			return
		}
		c.table = name
	}
}

// WithTTL sets how long a remembered id is kept; a redelivery after that runs the
// message again. Zero, the default of the reference and PHP stores, keeps it until
// Forget. Lapsed rows are absent to every call at once and deleted by
// [Store.DeleteExpired]. The PHP layout counts whole seconds.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) {
		if ttl < 0 {
			c.invalid("TTL %s is negative", ttl)
			return
		}
		c.ttl = ttl
	}
}

// WithLogger sets the logger of [Store.RunCleanup] (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.invalid("logger is nil")
			return
		}
		c.log = l
	}
}

// Store is an [idempotency.ClaimStore] in a PostgreSQL table. Its methods are safe for
// concurrent use.
type Store struct {
	db     *sql.DB
	owned  bool
	layout Layout
	table  string
	ttl    time.Duration
	log    *slog.Logger
	q      statements
}

// New opens a pool on dsn (a postgres:// URL or key=value DSN, as pgx parses it) and
// checks that the database answers. [Store.Close] closes the pool. The password in dsn
// never appears in errors.
func New(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	s, err := NewFromDB(db, opts...)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	s.owned = true
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("pgstore: the database does not answer: %w", err)
	}
	return s, nil
}

// NewFromDB returns a store on a pool the caller opened and keeps: [Store.Close]
// leaves it open. It must reach PostgreSQL; the store's SQL is PostgreSQL's.
func NewFromDB(db *sql.DB, opts ...Option) (*Store, error) {
	c, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if db == nil {
		return nil, fmt.Errorf("%w: pgstore: the *sql.DB is nil", babelqueue.ErrInvalidOption)
	}
	return &Store{db: db, layout: c.layout, table: c.table, ttl: c.ttl, log: c.log, q: statementsFor(c.layout, c.table)}, nil
}

func buildConfig(opts []Option) (config, error) {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if len(c.errs) > 0 {
		return c, errors.Join(c.errs...)
	}
	if c.table == "" {
		c.table = map[Layout]string{LayoutReference: ReferenceTable, LayoutPHP: PHPTable}[c.layout]
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// Close closes the pool when [New] opened it.
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	return s.db.Close()
}

// Table returns the table the store uses.
func (s *Store) Table() string { return s.table }

// Claim implements [idempotency.ClaimStore].
func (s *Store) Claim(ctx context.Context, id string, lease time.Duration) (idempotency.Claim, error) {
	args := []any{id, wholeSeconds(lease)}
	if s.layout == LayoutReference {
		args = []any{id, max(lease.Milliseconds(), 1), rand.Text()}
	}
	var (
		kind      int
		got       sql.NullString
		remaining sql.NullFloat64
	)
	err := s.db.QueryRowContext(ctx, s.q.claim, args...).Scan(&kind, &got, &remaining)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// The row was committed by a concurrent transaction after this statement's
		// snapshot: someone holds or remembered it a moment ago.
		return idempotency.Claim{Status: idempotency.Held}, nil
	case err != nil:
		return idempotency.Claim{}, err
	case kind == 1:
		return idempotency.Claim{Status: idempotency.Claimed, Token: got.String}, nil
	}
	left := time.Duration(0)
	if remaining.Valid && remaining.Float64 > 0 {
		left = time.Duration(remaining.Float64 * float64(time.Second))
	}
	if kind == 2 && (!remaining.Valid || left > 0) {
		return idempotency.Claim{Status: idempotency.Remembered}, nil
	}
	return idempotency.Claim{Status: idempotency.Held, Remaining: left}, nil
}

// Release implements [idempotency.ClaimStore].
func (s *Store) Release(ctx context.Context, id, token string) error {
	var arg any = token
	if s.layout == LayoutPHP {
		n, err := strconv.ParseInt(token, 10, 64)
		if err != nil {
			return nil // not a token of this layout: no claim of the caller's
		}
		arg = n
	}
	_, err := s.db.ExecContext(ctx, s.q.release, id, arg)
	return err
}

// Seen implements [idempotency.Store].
func (s *Store) Seen(ctx context.Context, id string) (bool, error) {
	var ok bool
	err := s.db.QueryRowContext(ctx, s.q.seen, id).Scan(&ok)
	return ok, err
}

// Remember implements [idempotency.Store].
func (s *Store) Remember(ctx context.Context, id string) error {
	span := int64(0)
	if s.ttl > 0 {
		span = max(s.ttl.Milliseconds(), 1)
		if s.layout == LayoutPHP {
			span = wholeSeconds(s.ttl)
		}
	}
	_, err := s.db.ExecContext(ctx, s.q.remember, id, span)
	return err
}

// Forget implements [idempotency.Store].
func (s *Store) Forget(ctx context.Context, id string) error {
	_, err := s.db.ExecContext(ctx, s.q.forget, id)
	return err
}

// cleanupBatch is how many lapsed rows one DELETE of DeleteExpired removes.
const cleanupBatch = 5000

// DeleteExpired deletes the lapsed rows (remembered ids past their TTL, claims past
// their lease), in batches of 5,000, and returns how many. Lapsed rows are already
// absent to every other call: this only reclaims the space.
func (s *Store) DeleteExpired(ctx context.Context) (int64, error) {
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, s.q.deleteExpired, cleanupBatch)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
		if n < cleanupBatch {
			return total, nil
		}
	}
}

// CleanupTimeout bounds each round of [Store.RunCleanup]: a database whose connection
// went silent (open, no byte through) fails the round within it, which is logged,
// instead of holding the loop until the connection's own timeouts, if any (issue 38).
const CleanupTimeout = 10 * time.Second

// RunCleanup calls [Store.DeleteExpired] now and then every interval until ctx ends,
// and returns nil then. A failure (the database is away, or did not answer within
// [CleanupTimeout]) is logged and tried again at the next tick.
func (s *Store) RunCleanup(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("%w: pgstore: cleanup interval %s (want more than zero)", babelqueue.ErrInvalidOption, every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, CleanupTimeout)
		n, err := s.DeleteExpired(rctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("pgstore: deleting lapsed idempotency rows failed; trying again at the next tick",
				"table", s.table, "next", every, "error", err)
		case n > 0:
			s.log.Debug("pgstore: deleted lapsed idempotency rows", "table", s.table, "rows", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Migrate creates the table and its index when they are missing, and adds the
// claim_token column to a reference table created without it. It is safe to run on
// every start and from several workers at once (an advisory lock serialises them).
func (s *Store) Migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "babelqueue-idempotency:"+s.table); err != nil {
		return err
	}
	for _, stmt := range migration(s.layout, s.table) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("pgstore: migrate %s: %w", s.table, err)
		}
	}
	return tx.Commit()
}

// Migration returns the SQL [Store.Migrate] runs, for a migration tool of your own.
func (s *Store) Migration() string { return joinStatements(migration(s.layout, s.table)) }

// Migration returns the SQL that creates the table of the store opts describe, for a
// migration tool of your own, without a database.
func Migration(opts ...Option) (string, error) {
	c, err := buildConfig(opts)
	if err != nil {
		return "", err
	}
	return joinStatements(migration(c.layout, c.table)), nil
}

func joinStatements(stmts []string) string { return strings.Join(stmts, ";\n\n") + ";\n" }

func migration(l Layout, table string) []string {
	index := table[strings.LastIndexByte(table, '.')+1:] + "_expires_at_idx"
	if l == LayoutPHP {
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
    message_id VARCHAR(255) NOT NULL,
    state      VARCHAR(16)  NOT NULL,
    expires_at BIGINT       NULL,
    PRIMARY KEY (message_id)
)`,
			`CREATE INDEX IF NOT EXISTS ` + index + ` ON ` + table + ` (expires_at)`,
		}
	}
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + table + ` (
    message_id  TEXT        NOT NULL PRIMARY KEY,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NULL,
    claim_token TEXT        NULL
)`,
		`ALTER TABLE ` + table + ` ADD COLUMN IF NOT EXISTS claim_token TEXT NULL`,
		`CREATE INDEX IF NOT EXISTS ` + index + ` ON ` + table + ` (expires_at)`,
	}
}

var _ idempotency.ClaimStore = (*Store)(nil)
