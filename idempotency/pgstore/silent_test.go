package pgstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
	"github.com/babelqueue-go/babelqueue/idempotency/pgstore"
	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// The store's database connections go silent (a black hole: open, no byte through).
// The middleware's claim before the handler fails within its store timeout with a
// StoreError matching context.DeadlineExceeded (the handler does not run), and a
// cleanup round fails within pgstore.CleanupTimeout and is logged, instead of either
// waiting on the connection for as long as it stays silent (issue 38: found within
// 10 s, logged when it happens).
func TestSilentDatabase(t *testing.T) {
	p, proxied := faultproxy.StartURL(t, pgURL(t))
	newStore(t, pgstore.LayoutReference) // the table, migrated
	logs := &transporttest.LogBuffer{}
	s, err := pgstore.New(context.Background(), proxied, pgstore.WithTable(tables[pgstore.LayoutReference]),
		pgstore.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	t.Cleanup(p.Thaw) // before the store closes, when the test fails frozen
	ran := false
	h, err := idempotency.Wrap(s, func(context.Context, *babelqueue.Message) error { ran = true; return nil },
		idempotency.WithStoreTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m := func() *babelqueue.Message {
		return &babelqueue.Message{Envelope: &envelope.Envelope{Meta: envelope.Meta{ID: idempotencytest.NewID()}}}
	}
	if err := h(context.Background(), m()); err != nil || !ran {
		t.Fatalf("before the freeze: %v (ran %v)", err, ran)
	}

	p.Freeze()
	ran = false
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- h(context.Background(), m()) }()
	select {
	case err := <-done:
		var se *idempotency.StoreError
		if !errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("claim on a silent database = %v, want a StoreError matching context.DeadlineExceeded", err)
		}
		t.Logf("the claim failed %s after it began (store timeout 1 s)", time.Since(start).Round(10*time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the claim still waits on the silent database 10 s on, past its 1 s store timeout")
	}
	if ran {
		t.Error("the handler ran while its claim could not be made")
	}

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	start = time.Now()
	go func() { stopped <- s.RunCleanup(ctx, time.Hour) }()
	const limit = pgstore.CleanupTimeout + 5*time.Second // and a slack for a loaded machine
	for !strings.Contains(logs.String(), "deleting lapsed idempotency rows failed") {
		if time.Since(start) > limit {
			t.Fatalf("the cleanup said nothing in %s while its database was silent (logs: %q)", limit, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the cleanup round failed and was logged %s after it began", time.Since(start).Round(100*time.Millisecond))
	cancel()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RunCleanup did not return once its context ended")
	}
}
