package pgstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
	"github.com/babelqueue-go/babelqueue/idempotency/pgstore"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// tables are this run's own tables, dropped when it ends, so runs never share rows.
var tables = map[pgstore.Layout]string{}

func TestMain(m *testing.M) {
	idempotencytest.CrashChild(openStore)
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	tables[pgstore.LayoutReference] = "bqtest_idemp_ref_" + suffix
	tables[pgstore.LayoutPHP] = "bqtest_idem_php_" + suffix
	code := m.Run()
	dropTables()
	os.Exit(code)
}

func dropTables() {
	db, err := sql.Open("pgx", os.Getenv("BQ_POSTGRES_URL"))
	if err != nil {
		return
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, t := range tables {
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t)
	}
}

// openStore opens a store on $BQ_POSTGRES_URL; spec is "<layout>:<table>". The crash
// tests' child process opens its store with it too.
func openStore(ctx context.Context, spec string) (idempotency.Store, error) {
	name, table, _ := strings.Cut(spec, ":")
	layout := pgstore.LayoutReference
	if name == "php" {
		layout = pgstore.LayoutPHP
	}
	return pgstore.New(ctx, os.Getenv("BQ_POSTGRES_URL"), pgstore.WithLayout(layout), pgstore.WithTable(table))
}

func spec(l pgstore.Layout) string { return l.String() + ":" + tables[l] }

func pgURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_POSTGRES_URL", "postgres")
}

var migrated sync.Map // layout → *sync.Once

// newStore opens a store on this run's table of the layout, migrated once.
func newStore(t testing.TB, layout pgstore.Layout, opts ...pgstore.Option) *pgstore.Store {
	t.Helper()
	ctx := context.Background()
	opts = append([]pgstore.Option{pgstore.WithLayout(layout), pgstore.WithTable(tables[layout])}, opts...)
	s, err := pgstore.New(ctx, pgURL(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	once, _ := migrated.LoadOrStore(layout, &sync.Once{})
	var merr error
	once.(*sync.Once).Do(func() { merr = s.Migrate(ctx) })
	if merr != nil {
		t.Fatal(merr)
	}
	return s
}

func rawDB(t testing.TB) *sql.DB {
	t.Helper()
	return rawDBAt(t, pgURL(t))
}

func rawDBAt(t testing.TB, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func config(layout pgstore.Layout) idempotencytest.Config {
	c := idempotencytest.Config{
		NewStore: func(t testing.TB, ttl time.Duration) idempotency.Store {
			return newStore(t, layout, pgstore.WithTTL(ttl))
		},
	}
	if layout == pgstore.LayoutPHP {
		c.Granularity = time.Second
	}
	return c
}

func TestKit(t *testing.T) {
	for _, layout := range []pgstore.Layout{pgstore.LayoutReference, pgstore.LayoutPHP} {
		t.Run(layout.String(), func(t *testing.T) { idempotencytest.Run(t, config(layout)) })
	}
}

// Eight workers, each with its own pool, over 2,000 messages delivered twice.
func TestConcurrency(t *testing.T) {
	for _, layout := range []pgstore.Layout{pgstore.LayoutReference, pgstore.LayoutPHP} {
		t.Run(layout.String(), func(t *testing.T) { idempotencytest.RunConcurrency(t, config(layout)) })
	}
}

func TestInvalidOptions(t *testing.T) {
	for name, opts := range map[string][]pgstore.Option{
		"negative TTL":          {pgstore.WithTTL(-time.Second)},
		"table with a quote":    {pgstore.WithTable(`x"; DROP TABLE y; --`)},
		"table with a space":    {pgstore.WithTable("my table")},
		"three-part table name": {pgstore.WithTable("a.b.c")},
		"unknown layout":        {pgstore.WithLayout(pgstore.Layout(5))},
		"nil logger":            {pgstore.WithLogger(nil)},
	} {
		if _, err := pgstore.Migration(opts...); !errors.Is(err, babelqueue.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := pgstore.NewFromDB(nil); !errors.Is(err, babelqueue.ErrInvalidOption) {
		t.Errorf("nil db: err = %v, want ErrInvalidOption", err)
	}
}

// A database that does not answer is an error at New, without the password.
func TestNewUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := pgstore.New(ctx, "postgres://user:s3cret@127.0.0.1:1/db?sslmode=disable&connect_timeout=2")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("New on a closed port: err = %v; want an error without the password", err)
	}
	_, err = pgstore.New(ctx, "postgres://user:s3cret@127.0.0.1:notaport/db")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("New on a DSN that does not parse: err = %v; want an error without the password", err)
	}
}

// The PHP layout's message_id is VARCHAR(255): a longer id is an error (the delivery is
// retried, then dead-lettered), never a truncated key.
func TestPHPLayoutRejectsLongIDs(t *testing.T) {
	s := newStore(t, pgstore.LayoutPHP)
	long := idempotencytest.NewID() + strings.Repeat("x", 256)
	if _, err := s.Claim(context.Background(), long, time.Minute); err == nil {
		t.Fatal("Claim of a 300-character id in the PHP layout: no error")
	}
}

func BenchmarkMiddleware(b *testing.B) {
	idempotencytest.Bench(b, config(pgstore.LayoutReference))
}

// BenchmarkCalls is each store call beside a raw round trip (SELECT 1) to the same
// database.
func BenchmarkCalls(b *testing.B) {
	db := rawDB(b)
	var one int
	idempotencytest.BenchCalls(b, config(pgstore.LayoutReference), func(ctx context.Context) error {
		return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	})
}
