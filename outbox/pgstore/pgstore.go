// Package pgstore is the PostgreSQL store of the transactional outbox (package outbox).
//
// The store works on database/sql: any PostgreSQL driver will do (the tests use pgx v5's
// stdlib driver, registered as "pgx"). Messages are saved in the caller's *sql.Tx, so
// they commit or roll back with the business rows:
//
//	db, _ := sql.Open("pgx", dsn)
//	store, _ := pgstore.New(db)
//	_ = store.Migrate(ctx)                    // or apply pgstore.Schema("bq_outbox") yourself
//	w := outbox.NewWriter(app, store)
//	tx, _ := db.BeginTx(ctx, nil)
//	// ... the business writes on tx ...
//	_, _ = w.Write(ctx, tx, "urn:babel:orders:paid", order)
//	_ = tx.Commit()
//
//	relay := outbox.NewRelay(store, tr)    // in this process or another
//	_ = relay.Run(ctx)
//
// # How relays share the table
//
// A claim is a database transaction: SELECT … FOR UPDATE SKIP LOCKED takes up to a
// batch of due rows, oldest first, and holds their row locks while the relay publishes
// them; the same transaction then deletes the rows the broker confirmed (or marks them
// published, with a retention) and gives the others one attempt more and a later
// available_at. Several relays on several machines therefore never claim the same row
// at once. A relay that dies mid-batch leaves its transaction to be rolled back by the
// server when its connection drops, so its rows are claimed again at once: at most the
// batch in flight is published twice.
//
// A keyed row is not claimed while an earlier unpublished row of the same key waits
// for its backoff or is held by another relay's claim, so the rows of one key reach
// the broker in the order of their ids, which is the order they were written. (Of two
// transactions that write the same key at the same time, the one that commits first may
// be published first although it drew the later id: a row is claimed once it is
// visible.)
//
// # Table
//
// [Schema] prints the migration; [Store.Migrate] applies it (idempotent, under an
// advisory lock). Published rows are deleted at once, unless [WithRetention] keeps
// them for a while (published_at set); [Store.Purge] then deletes the expired ones and
// the relay calls it now and then.
package pgstore

import (
	"context"
	"database/sql"
	_ "embed" // the migration
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/transport"
)

// DefaultTable is the table of the outbox when [WithTable] is not given.
const DefaultTable = "bq_outbox"

//go:embed schema.sql
var schemaSQL string

// identifier is a table name, optionally schema-qualified, that needs no quoting.
var identifier = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,62}$`)

// ErrBadTable is returned for a table name that is not a plain lower-case SQL
// identifier (optionally schema-qualified).
var ErrBadTable = errors.New("pgstore: table must be a lower-case identifier such as bq_outbox or app.bq_outbox")

// ErrNoTx is returned by Save without a transaction.
var ErrNoTx = errors.New("pgstore: Save needs the caller's *sql.Tx (the message must commit with the business rows)")

// ErrBadHeader is returned by Save for a header that PostgreSQL's jsonb cannot keep
// byte for byte (not UTF-8, or holding a NUL).
var ErrBadHeader = errors.New("pgstore: header is not UTF-8 text without NUL")

// Schema returns the migration that creates table (and its indexes).
func Schema(table string) (string, error) {
	if !identifier.MatchString(table) {
		return "", fmt.Errorf("%w: %q", ErrBadTable, table)
	}
	name := table[strings.LastIndexByte(table, '.')+1:]
	return strings.NewReplacer("{{table}}", table, "{{name}}", name).Replace(schemaSQL), nil
}

// Option configures a [Store].
type Option func(*Store)

// WithTable sets the table (default [DefaultTable]).
func WithTable(table string) Option { return func(s *Store) { s.table = table } }

// WithRetention keeps published rows for d (published_at set) instead of deleting them
// at once; [Store.Purge] deletes them after that. Zero (the default) deletes them when
// they are published.
func WithRetention(d time.Duration) Option {
	return func(s *Store) { s.retention = max(d, 0) }
}

// Store is the PostgreSQL outbox store. It is safe for concurrent use.
type Store struct {
	db        *sql.DB
	table     string
	retention time.Duration

	q queries
}

var (
	_ outbox.Store   = (*Store)(nil)
	_ outbox.Purger  = (*Store)(nil)
	_ outbox.Counter = (*Store)(nil)
)

type queries struct {
	claim, blockers, relock, del, markPublished, fail, purge, pending string
}

// New returns a store on db. The relay's claims use db; Save uses the caller's
// transaction.
func New(db *sql.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("pgstore: nil *sql.DB")
	}
	s := &Store{db: db, table: DefaultTable}
	for _, o := range opts {
		o(s)
	}
	if !identifier.MatchString(s.table) {
		return nil, fmt.Errorf("%w: %q", ErrBadTable, s.table)
	}
	t := s.table
	s.q = queries{
		claim: `SELECT o.id, o.queue, o.body, o.msg_key, o.headers::text, o.urn, o.message_id, o.trace_id,
       o.lang, o.schema_version, o.created_at_ms, o.msg_attempts, o.delay_ms, o.attempts
FROM ` + t + ` o
WHERE o.published_at IS NULL AND o.available_at <= now()
  AND (o.msg_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM ` + t + ` p
        WHERE p.msg_key = o.msg_key AND p.published_at IS NULL AND p.attempts > 0
          AND p.msg_key IS NOT NULL AND p.id < o.id AND p.available_at > now()))
ORDER BY o.id
LIMIT $1
FOR UPDATE OF o SKIP LOCKED`,
		// For each key of a claim, the first unpublished row of the key before the
		// claim's last row of that key that the claim does not hold (locked by another
		// claim, or not due). One short index scan per key.
		blockers: `SELECT k.msg_key, b.id
FROM (SELECT c.msg_key, max(c.id) AS last FROM ` + t + ` c
      WHERE c.id = ANY($1::bigint[]) AND c.msg_key IS NOT NULL GROUP BY c.msg_key) k
CROSS JOIN LATERAL (
  SELECT o.id FROM ` + t + ` o
  WHERE o.msg_key = k.msg_key AND o.published_at IS NULL AND o.id < k.last AND NOT (o.id = ANY($1::bigint[]))
  ORDER BY o.id LIMIT 1) b`,
		relock: `SELECT id FROM ` + t + ` WHERE id = ANY($1::bigint[]) AND published_at IS NULL
ORDER BY id FOR UPDATE SKIP LOCKED`,
		del:           `DELETE FROM ` + t + ` WHERE id = ANY($1::bigint[])`,
		markPublished: `UPDATE ` + t + ` SET published_at = now(), last_error = NULL WHERE id = ANY($1::bigint[])`,
		fail: `UPDATE ` + t + ` SET attempts = attempts + 1, last_error = $2,
       available_at = now() + $3 * interval '1 millisecond'
WHERE id = ANY($1::bigint[])`,
		purge: `DELETE FROM ` + t + ` WHERE id IN (
  SELECT id FROM ` + t + ` WHERE published_at IS NOT NULL AND published_at < now() - $1 * interval '1 millisecond'
  LIMIT 10000)`,
		pending: `SELECT count(*) FROM ` + t + ` WHERE published_at IS NULL`,
	}
	return s, nil
}

// Table returns the store's table.
func (s *Store) Table() string { return s.table }

// Migrate creates the table and its indexes when they do not exist. Relays or
// services starting together may all call it: an advisory lock makes them take turns.
func (s *Store) Migrate(ctx context.Context) error {
	ddl, err := Schema(s.table)
	if err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "babelqueue-outbox:"+s.table); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if _, err := tx.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("pgstore: migrate %s: %w", s.table, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return nil
}

// columns of an insert, in order.
const insertColumns = "(queue, body, msg_key, headers, urn, message_id, trace_id, lang, schema_version, created_at_ms, msg_attempts, delay_ms)"

const perRow = 12

// maxRows keeps an insert under PostgreSQL's 65,535 parameters.
const maxRows = 1000

// Save inserts msgs, in order, inside tx.
func (s *Store) Save(ctx context.Context, tx *sql.Tx, msgs ...*transport.Message) error {
	if tx == nil {
		return ErrNoTx
	}
	args := make([]any, 0, perRow*min(len(msgs), maxRows))
	for len(msgs) > 0 {
		n := min(len(msgs), maxRows)
		args = args[:0]
		var b strings.Builder
		b.WriteString("INSERT INTO " + s.table + " " + insertColumns + " VALUES ")
		for i, m := range msgs[:n] {
			row, err := rowArgs(m)
			if err != nil {
				return err
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('(')
			for j := range perRow {
				if j > 0 {
					b.WriteByte(',')
				}
				b.WriteString("$" + strconv.Itoa(len(args)+j+1))
				if j == 3 {
					b.WriteString("::jsonb")
				}
			}
			b.WriteByte(')')
			args = append(args, row...)
		}
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("pgstore: save %d messages: %w", n, err)
		}
		msgs = msgs[n:]
	}
	return nil
}

// rowArgs returns the insert arguments of m.
func rowArgs(m *transport.Message) ([]any, error) {
	if m == nil || m.Queue == "" {
		return nil, errors.New("pgstore: message has no queue")
	}
	var headers any // NULL without headers
	if len(m.Headers) > 0 {
		for k, v := range m.Headers {
			for _, s := range [2]string{k, v} {
				if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
					return nil, fmt.Errorf("%w: %q", ErrBadHeader, k)
				}
			}
		}
		h, err := json.Marshal(m.Headers)
		if err != nil {
			return nil, fmt.Errorf("pgstore: headers: %w", err)
		}
		headers = string(h)
	}
	var key any // NULL for a nil key; an empty key stays an empty bytea
	if m.Key != nil {
		key = m.Key
	}
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	p := m.Projection
	return []any{m.Queue, body, key, headers, p.URN, p.MessageID, p.TraceID, p.Lang,
		int64(p.SchemaVersion), p.CreatedAt, int64(m.Attempts), m.Delay.Milliseconds()}, nil
}

// Claim begins a transaction and locks up to limit due rows, oldest first (see the
// package documentation). ctx bounds the claim's statements, BEGIN among them, so a
// connection that went silent fails the claim when ctx ends instead of hanging; the
// transaction itself outlives the call, until Commit or Rollback. A table that does
// not exist is an error matching [outbox.ErrNoTable].
func (s *Store) Claim(ctx context.Context, limit int) (outbox.Claim, error) {
	if limit <= 0 {
		return nil, errors.New("pgstore: claim limit must be positive")
	}
	// database/sql ends a transaction when the context it began with ends, and uses
	// that context for BEGIN, COMMIT and ROLLBACK alike. The claim outlives this call,
	// so its transaction gets a context of its own, cancelled when ctx ends during
	// BEGIN here, and during COMMIT or ROLLBACK by the claim's methods (bound).
	life, end := context.WithCancel(context.WithoutCancel(ctx))
	c := &claim{s: s, end: end}
	err := c.bound(ctx, func() (err error) {
		c.tx, err = s.db.BeginTx(life, nil)
		return err
	})
	if err != nil {
		end()
		return nil, s.explain(err)
	}
	if c.recs, err = s.claim(ctx, c.tx, limit); err != nil {
		_ = c.Rollback(ctx)
		return nil, s.explain(err)
	}
	return c, nil
}

// explain wraps err in [outbox.ErrNoTable] when PostgreSQL said the table does not
// exist (SQLSTATE 42P01, undefined_table), naming the table and the ways to create it.
// Every PostgreSQL driver for database/sql reports the state with a SQLState method.
func (s *Store) explain(err error) error {
	var state interface{ SQLState() string }
	if errors.As(err, &state) && state.SQLState() == "42P01" {
		return fmt.Errorf("%w: %s (create it with `babelqueue outbox migrate -table %s`, Store.Migrate or pgstore.Schema): %w",
			outbox.ErrNoTable, s.table, s.table, err)
	}
	return err
}

func (s *Store) claim(ctx context.Context, tx *sql.Tx, limit int) ([]outbox.Record, error) {
	// The locks the claim query takes are in a savepoint, so that those of rows dropped
	// for the order of their key can be let go (see relock).
	if _, err := tx.ExecContext(ctx, "SAVEPOINT bq_claim"); err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, s.q.claim, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var recs []outbox.Record
	keyed := false
	for rows.Next() {
		var (
			m                          transport.Message
			headers                    sql.NullString
			schemaVersion, msgAttempts int64
			delayMS                    int64
			rec                        outbox.Record
		)
		if err := rows.Scan(&rec.ID, &m.Queue, &m.Body, &m.Key, &headers, &m.Projection.URN, &m.Projection.MessageID,
			&m.Projection.TraceID, &m.Projection.Lang, &schemaVersion, &m.Projection.CreatedAt, &msgAttempts, &delayMS, &rec.Attempts); err != nil {
			return nil, err
		}
		if m.Body == nil {
			m.Body = []byte{}
		}
		if headers.Valid {
			if err := json.Unmarshal([]byte(headers.String), &m.Headers); err != nil {
				return nil, fmt.Errorf("pgstore: row %d: headers: %w", rec.ID, err)
			}
		}
		m.Projection.SchemaVersion = int(schemaVersion)
		m.Attempts = int(msgAttempts)
		m.Delay = time.Duration(delayMS) * time.Millisecond
		rec.Message = &m
		keyed = keyed || m.Key != nil
		recs = append(recs, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if !keyed {
		return recs, nil
	}
	kept, err := s.dropBlocked(ctx, tx, recs)
	if err != nil || len(kept) == len(recs) {
		return kept, err
	}
	return s.relock(ctx, tx, kept)
}

// relock lets go of the rows the claim dropped, so another claim can take them once
// their key's earlier row is published: it rolls back to the savepoint (which releases
// every row lock taken after it) and locks the kept rows again. A kept row another
// claim took in between is dropped with the later rows of its key.
func (s *Store) relock(ctx context.Context, tx *sql.Tx, kept []outbox.Record) ([]outbox.Record, error) {
	if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT bq_claim"); err != nil {
		return nil, err
	}
	if len(kept) == 0 {
		return nil, nil
	}
	rows, err := tx.QueryContext(ctx, s.q.relock, idArray(recordIDs(kept)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	held := make(map[int64]bool, len(kept))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		held[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	lost := map[string]bool{} // keys with a row another claim took
	out := kept[:0]
	for _, r := range kept {
		k := r.Message.Key
		if !held[r.ID] || (k != nil && lost[string(k)]) {
			if k != nil {
				lost[string(k)] = true
			}
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// dropBlocked removes from recs the keyed rows that come after an unpublished row of
// their key that the claim does not hold.
func (s *Store) dropBlocked(ctx context.Context, tx *sql.Tx, recs []outbox.Record) ([]outbox.Record, error) {
	rows, err := tx.QueryContext(ctx, s.q.blockers, idArray(recordIDs(recs)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	first := map[string]int64{}
	for rows.Next() {
		var key []byte
		var id int64
		if err := rows.Scan(&key, &id); err != nil {
			return nil, err
		}
		first[string(key)] = id
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(first) == 0 {
		return recs, nil
	}
	kept := recs[:0]
	for _, r := range recs {
		if b, ok := first[string(r.Message.Key)]; ok && r.Message.Key != nil && r.ID > b {
			continue
		}
		kept = append(kept, r)
	}
	return kept, nil
}

// idArray formats ids as a PostgreSQL array literal, which every driver passes as text.
func idArray(ids []int64) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteByte('}')
	return b.String()
}

func recordIDs(recs []outbox.Record) []int64 {
	ids := make([]int64, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return ids
}

// Purge deletes published rows older than the retention, and returns how many.
func (s *Store) Purge(ctx context.Context) (int64, error) {
	if s.retention == 0 {
		return 0, nil
	}
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, s.q.purge, s.retention.Milliseconds())
		if err != nil {
			return total, fmt.Errorf("pgstore: purge: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
		if n < 10000 {
			return total, nil
		}
	}
}

// Pending returns how many rows are not published yet.
func (s *Store) Pending(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, s.q.pending).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: count pending rows: %w", err)
	}
	return n, nil
}

// text makes s storable in a text column: valid UTF-8 without NUL.
func text(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", " ")
}

type claim struct {
	s    *Store
	tx   *sql.Tx
	end  context.CancelFunc // ends the transaction's context
	recs []outbox.Record
}

// bound runs f, a call on the transaction, and ends the transaction's context if ctx
// ends first: the driver then gives up on a connection that went silent, and
// database/sql rolls the transaction back and discards the connection. It returns
// ctx's error when that happened.
func (c *claim) bound(ctx context.Context, f func() error) error {
	stop := context.AfterFunc(ctx, c.end)
	err := f()
	if !stop() && ctx.Err() != nil {
		if err == nil || errors.Is(err, ctx.Err()) {
			return fmt.Errorf("pgstore: the database did not answer in time: %w", ctx.Err())
		}
		return fmt.Errorf("pgstore: the database did not answer in time: %w (%w)", ctx.Err(), err)
	}
	return err
}

func (c *claim) Records() []outbox.Record { return c.recs }

func (c *claim) Rollback(ctx context.Context) error {
	defer c.end()
	return c.bound(ctx, c.tx.Rollback)
}

func (c *claim) Commit(ctx context.Context, r outbox.Result) error {
	defer c.end()
	if err := c.commit(ctx, r); err != nil {
		_ = c.bound(ctx, c.tx.Rollback)
		return err
	}
	return nil
}

func (c *claim) commit(ctx context.Context, r outbox.Result) error {
	if len(r.Published) > 0 {
		q := c.s.q.del
		if c.s.retention > 0 {
			q = c.s.q.markPublished
		}
		if _, err := c.tx.ExecContext(ctx, q, idArray(r.Published)); err != nil {
			return fmt.Errorf("pgstore: mark %d rows published: %w", len(r.Published), err)
		}
	}
	// Failed rows that share their error and backoff (a broker outage fails a whole
	// batch alike) go in one statement.
	type group struct {
		err   string
		retry int64
	}
	groups := map[group][]int64{}
	var order []group
	for _, f := range r.Failed {
		g := group{text(f.Err), f.RetryIn.Milliseconds()}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], f.ID)
	}
	for _, g := range order {
		if _, err := c.tx.ExecContext(ctx, c.s.q.fail, idArray(groups[g]), g.err, g.retry); err != nil {
			return fmt.Errorf("pgstore: record %d failed rows: %w", len(groups[g]), err)
		}
	}
	return c.bound(ctx, c.tx.Commit)
}
