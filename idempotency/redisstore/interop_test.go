package redisstore_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transport"
	_ "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

const interopURN = "urn:babel:interop:idempotency"

// The Python SDK's helper (babelqueue.idempotency.wrap, run by the Python runtime on
// the Redis broker) and a Go worker share one store in the reference layout: a message
// one of them handled is acknowledged without running by the other, both directions.
func TestPythonInterop(t *testing.T) {
	url := redisURL(t)
	peer := pyinterop.Script(t, "idempotency_peer.py")
	pyinterop.Python(t)
	ctx := context.Background()
	rdb := rawClient(t)
	q := transporttest.UniqueName("bq-idemp-py")
	t.Cleanup(func() { rdb.Del(ctx, q, q+":processing", q+":processing:deadlines", q+":delayed", q+".dlq") })

	rec := transporttest.NewRecorder()
	app, err := babelqueue.Open(ctx, url, babelqueue.WithQueue(q), babelqueue.WithObserver(rec),
		babelqueue.WithLogger(brokerproc.TestLogger(t, slog.LevelWarn)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close(ctx) })
	dedupe, err := idempotency.Middleware(newStore(t))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var goEffects []string
	app.Use(dedupe)
	app.Handle(interopURN, func(_ context.Context, m *babelqueue.Message) error {
		mu.Lock()
		goEffects = append(goEffects, m.ID())
		mu.Unlock()
		return nil
	})
	effectsOf := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, e := range goEffects {
			if e == id {
				n++
			}
		}
		return n
	}
	prepare := func(t *testing.T) *transport.Message {
		m, err := app.Prepare(ctx, interopURN, map[string]string{"order": "A-1"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rdb.Del(ctx, "bq:idemp:"+m.Projection.MessageID) })
		return m
	}
	send := func(t *testing.T, m *transport.Message) {
		if err := app.Transport().Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	goWorker := func(t *testing.T, id string) { // runs until the id is acknowledged
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- app.Run(runCtx) }()
		idempotencytest.WaitAcked(t, rec, id, 30*time.Second)
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	python := func(t *testing.T) (effects []string) {
		out := pyinterop.Run(t, 60*time.Second, nil, peer, "handle", url, q, url)
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var row struct {
				Effect  string `json:"effect"`
				Handled int    `json:"handled"`
			}
			if err := json.Unmarshal([]byte(line), &row); err != nil {
				t.Fatalf("python printed %q: %v", line, err)
			}
			if row.Effect != "" {
				effects = append(effects, row.Effect)
			}
			if row.Handled != 0 && row.Handled != 1 {
				t.Fatalf("python handled %d messages, want 1", row.Handled)
			}
		}
		return effects
	}

	t.Run("python remembers, the go worker acknowledges the duplicate without running", func(t *testing.T) {
		m := prepare(t)
		id := m.Projection.MessageID
		send(t, m)
		if got := python(t); len(got) != 1 || got[0] != id {
			t.Fatalf("python effects %v, want one for %s", got, id)
		}
		if v := rdb.Get(ctx, "bq:idemp:"+id).Val(); v != "1" {
			t.Fatalf("python's store left %q at bq:idemp:<id>, want \"1\"", v)
		}
		send(t, m) // the duplicate
		goWorker(t, id)
		if n := effectsOf(id); n != 0 {
			t.Fatalf("the go worker ran the message python had handled (%d times)", n)
		}
	})
	t.Run("go remembers, python acknowledges the duplicate without running", func(t *testing.T) {
		m := prepare(t)
		id := m.Projection.MessageID
		send(t, m)
		goWorker(t, id)
		if n := effectsOf(id); n != 1 {
			t.Fatalf("the go worker ran it %d times, want once", n)
		}
		if v := rdb.Get(ctx, "bq:idemp:"+id).Val(); v != "1" {
			t.Fatalf("the go store left %q at bq:idemp:<id>, want \"1\"", v)
		}
		send(t, m) // the duplicate
		if got := python(t); len(got) != 0 {
			t.Fatalf("python ran the message the go worker had handled: %v", got)
		}
		if n := rdb.LLen(ctx, q).Val() + rdb.LLen(ctx, q+":processing").Val(); n != 0 {
			t.Fatalf("%d messages left on the queue", n)
		}
	})
}
