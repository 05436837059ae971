package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/outbox/pgstore"
	"github.com/babelqueue-go/babelqueue/transport"
)

const outboxUsage = `Usage:
  babelqueue outbox relay -db DSN [flags] URL   publish the outbox table's rows to the broker at URL
  babelqueue outbox migrate -db DSN [-table T]  create the outbox table if it does not exist
  babelqueue outbox schema [-table T]           print the outbox table's migration (SQL)

DSN is a PostgreSQL connection string (postgres://user:pass@host:5432/db); without -db,
$BQ_OUTBOX_DB is used.
`

// outboxCmd runs the "outbox" subcommands.
func outboxCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, outboxUsage)
		return usageError{"outbox needs a subcommand: relay, migrate or schema"}
	}
	switch args[0] {
	case "relay":
		return outboxRelay(ctx, args[1:], stdout, stderr)
	case "migrate":
		return outboxMigrate(ctx, args[1:], stdout, stderr)
	case "schema":
		return outboxSchema(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, outboxUsage)
		return nil
	default:
		fmt.Fprint(stderr, outboxUsage)
		return usageError{fmt.Sprintf("unknown outbox subcommand %q", args[0])}
	}
}

// outboxFlags are the flags every outbox subcommand that reaches the database shares.
type outboxFlags struct {
	db, table *string
}

func addOutboxFlags(fs *flag.FlagSet) outboxFlags {
	return outboxFlags{
		db:    fs.String("db", "", "PostgreSQL DSN of the outbox database (default $BQ_OUTBOX_DB)"),
		table: fs.String("table", pgstore.DefaultTable, "the outbox table"),
	}
}

// open connects to the outbox database and returns the store on it.
func (f outboxFlags) open(ctx context.Context, opts ...pgstore.Option) (*sql.DB, *pgstore.Store, error) {
	dsn := *f.db
	if dsn == "" {
		dsn = os.Getenv("BQ_OUTBOX_DB")
	}
	if dsn == "" {
		return nil, nil, usageError{"-db (or $BQ_OUTBOX_DB) is required"}
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, nil, errors.New("outbox database: the DSN does not parse (it is not shown, as it may hold a password)")
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("outbox database: %w", err)
	}
	store, err := pgstore.New(db, append([]pgstore.Option{pgstore.WithTable(*f.table)}, opts...)...)
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return db, store, nil
}

func outboxSchema(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("outbox schema", flag.ContinueOnError)
	fs.SetOutput(stderr)
	table := fs.String("table", pgstore.DefaultTable, "the outbox table")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ddl, err := pgstore.Schema(*table)
	if err != nil {
		return usageError{err.Error()}
	}
	fmt.Fprint(stdout, ddl)
	return nil
}

func outboxMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("outbox migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	of := addOutboxFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	db, store, err := of.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "outbox table %s is ready\n", store.Table())
	return nil
}

func outboxRelay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("outbox relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	of := addOutboxFlags(fs)
	batch := fs.Int("batch", outbox.DefaultBatchSize, "rows per claim")
	poll := fs.Duration("poll", outbox.DefaultPollInterval, "wait after a batch that found nothing to publish")
	retention := fs.Duration("retention", 0, "keep published rows this long (0: delete them once published)")
	migrate := fs.Bool("migrate", false, "create the outbox table first if it does not exist")
	drain := fs.Bool("drain", false, "exit once nothing is left to publish, instead of running until interrupted")
	progress := fs.Duration("progress", time.Second, "how often to print the progress line (0: never)")
	grace := fs.Duration("grace", DefaultGrace, "after SIGTERM or Ctrl-C, how long the relay may take to finish the batch in flight, report and close before it exits without them")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url, err := urlArg(fs)
	if err != nil {
		return err
	}
	if _, frag := splitFragment(url); frag != "" {
		return usageError{fmt.Sprintf("%s names a queue (#%s), but the relay publishes each row to the queue it was written for: give the broker URL alone", transport.Redact(url), frag)}
	}
	if *batch <= 0 || *poll <= 0 || *retention < 0 || *progress < 0 {
		return usageError{"-batch and -poll must be positive, -retention and -progress not negative"}
	}
	if *grace <= 0 {
		return usageError{"-grace must be positive"}
	}
	db, store, err := of.open(ctx, pgstore.WithRetention(*retention))
	if err != nil {
		return err
	}
	// Once the grace is over the process exits without closing: a close would wait on
	// the connection that did not answer.
	over := false
	defer func() {
		if !over {
			_ = db.Close()
		}
	}()
	if *migrate {
		if err := store.Migrate(ctx); err != nil {
			return err
		}
	}
	tr, err := transport.Open(ctx, url)
	if err != nil {
		return err
	}
	bound := func(d time.Duration) (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), d)
	}
	defer func() {
		if !over {
			cctx, cancel := bound(10 * time.Second)
			defer cancel()
			_ = tr.Close(cctx)
		}
	}()
	relay := outbox.NewRelay(store, tr, outbox.WithBatchSize(*batch), outbox.WithPollInterval(*poll),
		outbox.WithLogger(quietLogger(stderr)))

	var stopProgress func()
	if *progress > 0 {
		stopProgress = reportProgress(ctx, relay, *progress, stdout)
	}
	over, bound, err = graceful(ctx, *grace, func() error {
		if *drain {
			_, err := relay.Drain(ctx)
			return err
		}
		return relay.Run(ctx)
	})
	if stopProgress != nil {
		stopProgress()
	}
	if over {
		st := relay.Stats()
		return fmt.Errorf("the batch in flight did not finish within the -grace of %s after the interrupt "+
			"(the database or the broker did not answer; last error: %s): exiting without it; its rows stay in the table "+
			"and are published again by the next relay (published %d row(s) before)", *grace, cmp.Or(st.LastError, "none"), st.Published)
	}
	if err != nil {
		return err
	}
	pctx, cancel := bound(10 * time.Second)
	defer cancel()
	pending, _, perr := relay.Pending(pctx)
	st := relay.Stats()
	left := fmt.Sprintf("%d pending", pending)
	if perr != nil {
		left = "pending not counted: " + perr.Error()
	}
	fmt.Fprintf(stdout, "outbox relay: published %d row(s), %d publish(es) not confirmed, %s\n", st.Published, st.Failed, left)
	if *drain && perr == nil && pending > 0 {
		return fmt.Errorf("%d row(s) still pending after the drain (last error: %s)", pending, st.LastError)
	}
	return nil
}

// reportProgress prints a line every interval while something changes: rows
// published (and the rate since the last line), publishes not confirmed, rows pending.
// The returned func stops it and waits for it.
func reportProgress(ctx context.Context, relay *outbox.Relay, every time.Duration, w io.Writer) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		last, lastAt := relay.Stats(), time.Now()
		lastPending := int64(-1)
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				st := relay.Stats()
				pctx, pcancel := context.WithTimeout(ctx, every)
				pending, ok, err := relay.Pending(pctx)
				pcancel()
				if st.Published == last.Published && st.Failed == last.Failed && pending == lastPending {
					continue
				}
				rate := float64(st.Published-last.Published) / now.Sub(lastAt).Seconds()
				line := fmt.Sprintf("outbox relay: published %d (%.0f/s), %d not confirmed", st.Published, rate, st.Failed)
				switch {
				case err != nil:
					line += ", pending unknown (database unreachable)"
				case ok:
					line += fmt.Sprintf(", %d pending", pending)
				}
				if st.LastError != "" && st.LastErrorAt.After(lastAt) {
					line += "; last error: " + st.LastError
				}
				fmt.Fprintln(w, line)
				last, lastAt, lastPending = st, now, pending
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
