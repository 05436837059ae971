package pgstore_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/outbox/pgstore"
)

// The relay's database connections go silent (a black hole: open, no byte through):
// the relay notices within its store timeout and says so, keeps nothing it could not
// mark, publishes everything once the network heals, and stops promptly when asked to
// while the database is still silent.
func TestDatabaseBlackhole(t *testing.T) {
	tg := targets[0] // the broker does not matter here
	f := newFixture(t, tg)
	p, proxied := faultproxy.StartURL(t, pgURL(t))
	store, err := pgstore.New(openDB(t, proxied), pgstore.WithTable(f.store.Table()))
	if err != nil {
		t.Fatal(err)
	}
	const storeTimeout = 2 * time.Second
	opts := append(outageOptions(3*time.Second), outbox.WithStoreTimeout(storeTimeout),
		outbox.WithLogger(testLogger(t)), outbox.WithPollInterval(20*time.Millisecond))
	relay := outbox.NewRelay(store, tg.open(t, nil), opts...)
	stop := run(relay)
	defer stop()

	ids := f.write(t, 0, 200)
	f.waitPending(t, 0, 30*time.Second)
	p.Freeze()
	frozen := time.Now()
	ids = append(ids, f.write(t, 200, 200)...) // straight to the database, not through the proxy
	// The relay reports the silent database within a few store timeouts (liveness, not speed).
	deadline := frozen.Add(10 * storeTimeout)
	for relay.Stats().LastErrorAt.Before(frozen) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	st := relay.Stats()
	if st.LastErrorAt.Before(frozen) {
		t.Fatalf("the relay said nothing in %s while its database connections were silent", 10*storeTimeout)
	}
	t.Logf("silent database noticed after %s: %q", st.LastErrorAt.Sub(frozen).Round(time.Millisecond), st.LastError)
	p.Thaw()
	f.waitPending(t, 0, 60*time.Second)

	// Silent again, and the relay is asked to stop: it returns within its bounds instead
	// of waiting on the database.
	p.Freeze()
	time.Sleep(100 * time.Millisecond)
	stopped := make(chan error, 1)
	asked := time.Now()
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stopped %s after it was asked to, its database silent", time.Since(asked).Round(time.Millisecond))
	case <-time.After(10 * storeTimeout):
		t.Fatalf("the relay did not stop within %s while its database was silent", 10*storeTimeout)
	}
	p.Thaw()

	gots := tg.collect(t, f.queue, len(ids), 2*time.Second, 30*time.Second)
	dups := checkAll(t, gots, ids)
	if int64(dups) > relay.Stats().Unmarked {
		t.Fatalf("%d duplicates but only %d rows were published without being marked", dups, relay.Stats().Unmarked)
	}
}

// syncBuffer is a log sink the relay's goroutine writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A relay pointed at a database without its table says so once, naming the command
// that creates it, keeps trying, and publishes once the table is made.
func TestMissingTableSaidOnce(t *testing.T) {
	tg := targets[0]
	f := newFixture(t, tg)
	missing, err := pgstore.New(f.db, pgstore.WithTable(f.store.Table()+"_missing"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = f.db.Exec("DROP TABLE IF EXISTS " + missing.Table()) })

	if _, err := missing.Claim(ctxT(t), 10); !errors.Is(err, outbox.ErrNoTable) || !strings.Contains(err.Error(), "babelqueue outbox migrate") {
		t.Fatalf("Claim on a missing table: %v, want outbox.ErrNoTable naming the migrate command", err)
	}

	var logs syncBuffer
	relay := outbox.NewRelay(missing, tg.open(t, nil), outbox.WithPollInterval(20*time.Millisecond),
		outbox.WithBackoff(func(int) time.Duration { return 20 * time.Millisecond }),
		outbox.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	stop := run(relay)
	defer stop()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(logs.String(), "outbox: claim") < 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // some 20 retries more
	said := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "outbox migrate") {
			said++
		}
	}
	if said != 1 {
		t.Fatalf("the missing table was said in %d log lines, want one:\n%s", said, logs.String())
	}

	if err := missing.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	mf := *f
	mf.store = missing
	mf.w = outbox.NewWriter(f.app, missing)
	ids := mf.write(t, 0, 20)
	mf.waitPending(t, 0, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkAll(t, tg.collect(t, f.queue, len(ids), 2*time.Second, 30*time.Second), ids)
}
