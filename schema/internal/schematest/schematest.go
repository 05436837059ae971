// Package schematest holds what the tests of package schema and package fieldcrypt
// share: running an app until it settled, a Redis queue for end-to-end tests, and the
// Python peer script.
package schematest

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// RunUntilSettled runs app until rec saw n settlements, then stops it.
func RunUntilSettled(t testing.TB, app *babelqueue.App, rec *transporttest.Recorder, n int) []babelqueue.SettledEvent {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	events := rec.WaitSettled(t, n, 20*time.Second)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	return events
}

// Paired times base and work in turns inside one benchmark loop (blocks of 8 calls
// each), so both see the same load on a shared machine, and reports each per call
// (base-ns/msg, with-ns/msg) and their ratio (x-base).
func Paired(b *testing.B, base, work func()) {
	const block = 8
	var tb, tw time.Duration
	for b.Loop() {
		t0 := time.Now()
		for range block {
			base()
		}
		t1 := time.Now()
		for range block {
			work()
		}
		tb += t1.Sub(t0)
		tw += time.Since(t1)
	}
	n := float64(b.N * block)
	b.ReportMetric(float64(tb.Nanoseconds())/n, "base-ns/msg")
	b.ReportMetric(float64(tw.Nanoseconds())/n, "with-ns/msg")
	b.ReportMetric(float64(tw)/float64(tb), "x-base")
}

// Redis is a fresh queue on the Redis named by BQ_REDIS_URL (the test fails under
// CI=true, and is skipped elsewhere, without one).
type Redis struct {
	URL   string
	Queue string
	tr    *bqredis.Transport
}

// NewRedis opens the Redis of BQ_REDIS_URL and names a queue of its own; the test's
// cleanup deletes the queue's keys and its dead-letter queue's.
func NewRedis(t testing.TB) *Redis {
	t.Helper()
	url := transporttest.BrokerURL(t, "BQ_REDIS_URL", "redis")
	tr, err := transport.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	r := &Redis{URL: url, Queue: transporttest.UniqueName("bq-schema"), tr: tr.(*bqredis.Transport)}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, q := range []string{r.Queue, r.Queue + ".dlq"} {
			r.tr.Client().Del(ctx, q, q+":processing", q+":processing:deadlines", q+":delayed")
		}
		_ = tr.Close(ctx)
	})
	return r
}

// Consumer opens an app on r's queue with dead-lettering on, max_attempts 5 and rec as
// its observer; the test's cleanup closes it.
func (r *Redis) Consumer(t testing.TB) (*babelqueue.App, *transporttest.Recorder) {
	t.Helper()
	rec := transporttest.NewRecorder()
	app, err := babelqueue.Open(context.Background(), r.URL,
		babelqueue.WithQueue(r.Queue), babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(5),
		babelqueue.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	return app, rec
}

// Raw returns the elements of list, the bytes exactly as Redis holds them.
func (r *Redis) Raw(t testing.TB, list string) [][]byte {
	t.Helper()
	vals, err := r.tr.Client().LRange(context.Background(), list, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, len(vals))
	for i, v := range vals {
		out[i] = []byte(v)
	}
	return out
}

// Python runs scripts/py/schema_peer.py with args and doc (JSON-encoded) on stdin, and
// returns the JSON lines it printed.
func Python(t testing.TB, doc any, args ...string) []json.RawMessage {
	t.Helper()
	in, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	out := transporttest.RunPythonPeer(t, 60*time.Second, in, "schema_peer.py", args...)
	var lines []json.RawMessage
	for _, l := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		if len(l) > 0 {
			lines = append(lines, json.RawMessage(l))
		}
	}
	return lines
}
