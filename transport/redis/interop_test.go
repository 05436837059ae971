package redis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transport"
	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

const interopURN = "urn:babel:interop:redis"

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

type interopLayout struct {
	name    string
	query   string // URL query for both peers
	headers bool   // whether out-of-band headers ride in this layout on the Python side
}

var interopLayouts = []interopLayout{
	{"default", "?retry_after=1", true},
	{"laravel", "?laravel=1&prefix=bqtest:&retry_after=1", false},
}

func jsonLines(t *testing.T, out []byte) []map[string]any {
	t.Helper()
	var rows []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("python printed %q: %v", line, err)
		}
		rows = append(rows, m)
	}
	return rows
}

// runGo runs a Go runtime on queue until want messages were handled, and returns what
// the handler saw.
func runGo(t *testing.T, url, queue string, want int) []*babelqueue.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	app, err := babelqueue.Open(ctx, url, babelqueue.WithQueue(queue))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(context.Background())
	var (
		mu   sync.Mutex
		seen []*babelqueue.Message
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	app.Handle(interopURN, func(_ context.Context, m *babelqueue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, m)
		if len(seen) == want {
			// Stop after this handler returns and its ack is made.
			go func() { time.Sleep(200 * time.Millisecond); stop() }()
		}
		return nil
	})
	if err := app.Run(runCtx); err != nil && runCtx.Err() == nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != want {
		t.Fatalf("Go handled %d messages, want %d", len(seen), want)
	}
	return seen
}

// assertDrained checks that no key of queue holds anything: nothing is left reserved.
func assertDrained(t *testing.T, l interopLayout, queue string) {
	t.Helper()
	c := client(t)
	ctx := context.Background()
	keys := []string{queue, queue + ":processing", queue + ":processing:deadlines"}
	if l.name == "laravel" {
		r := "bqtest:" + queue
		keys = []string{r, r + ":reserved", r + ":delayed"}
	}
	for _, k := range keys {
		if n := c.Exists(ctx, k).Val(); n != 0 {
			t.Errorf("key %s is not empty after every message was settled", k)
		}
	}
}

func TestInteropPythonToGo(t *testing.T) {
	for _, l := range interopLayouts {
		t.Run(l.name, func(t *testing.T) {
			url := brokerURL(t) + l.query
			pyinterop.Python(t)
			q := transporttest.UniqueName("bqtest")
			cleanKeys(t, client(t), "*"+q+"*")
			produced := jsonLines(t, pyinterop.Run(t, 60*time.Second, nil, pyinterop.Script(t, "redis_peer.py"), "produce", url, q, "4"))
			seen := runGo(t, url, q, 4)
			ids := map[string]bool{}
			for _, p := range produced {
				ids[p["id"].(string)] = true
			}
			for _, m := range seen {
				if !ids[m.ID()] {
					t.Errorf("Go handled %s, which Python did not produce", m.ID())
				}
				if m.Envelope.Meta.Lang != "python" || m.Attempts != 0 {
					t.Errorf("meta.lang %q attempts %d, want python and 0", m.Envelope.Meta.Lang, m.Attempts)
				}
				var data struct {
					N    int    `json:"n"`
					From string `json:"from"`
				}
				if err := m.Bind(&data); err != nil || data.From != "python" {
					t.Errorf("data %+v (%v)", data, err)
				}
				if l.headers && data.N%2 == 1 && m.Header("traceparent") != traceparent {
					t.Errorf("message %d lost its traceparent header: %v", data.N, m.Headers())
				}
			}
			assertDrained(t, l, q)
		})
	}
}

func TestInteropGoToPython(t *testing.T) {
	for _, l := range interopLayouts {
		t.Run(l.name, func(t *testing.T) {
			url := brokerURL(t) + l.query
			pyinterop.Python(t)
			q := transporttest.UniqueName("bqtest")
			cleanKeys(t, client(t), "*"+q+"*")
			ctx := ctxT(t)
			app, err := babelqueue.Open(ctx, url, babelqueue.WithQueue(q))
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close(ctx)
			ids := map[string]bool{}
			for i := range 4 {
				var opts []babelqueue.PublishOption
				if i%2 == 1 {
					opts = append(opts, babelqueue.WithHeaders(map[string]string{"traceparent": traceparent}))
				}
				id, err := app.Publish(ctx, interopURN, map[string]any{"n": i, "from": "go"}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				ids[id] = true
			}
			// Transport level: Python reserves and acks, and sees the envelope and headers.
			rows := jsonLines(t, pyinterop.Run(t, 60*time.Second, nil, pyinterop.Script(t, "redis_peer.py"), "consume", url, q, "2"))
			for _, r := range rows {
				var env struct {
					Meta struct {
						ID   string `json:"id"`
						Lang string `json:"lang"`
					} `json:"meta"`
					Data struct {
						N int `json:"n"`
					} `json:"data"`
				}
				if err := json.Unmarshal([]byte(r["body"].(string)), &env); err != nil {
					t.Fatalf("python got a body that is not an envelope: %q", r["body"])
				}
				if !ids[env.Meta.ID] || env.Meta.Lang != "go" {
					t.Errorf("python got %+v", env)
				}
				h, _ := r["headers"].(map[string]any)
				if l.headers && env.Data.N%2 == 1 && h["traceparent"] != traceparent {
					t.Errorf("python lost the traceparent of message %d: %v", env.Data.N, h)
				}
			}
			// Runtime level: the Python runtime handles the rest.
			handled := jsonLines(t, pyinterop.Run(t, 60*time.Second, nil, pyinterop.Script(t, "redis_peer.py"), "handle", url, q, "2"))
			for _, r := range handled {
				if r["lang"] != "go" || r["attempts"] != float64(0) {
					t.Errorf("python runtime saw %v", r)
				}
			}
			assertDrained(t, l, q)
		})
	}
}

// TestInteropPythonRetryHandledInGo: the Python runtime's handler fails, Python
// re-queues the message with attempts 1, and a Go worker handles it.
func TestInteropPythonRetryHandledInGo(t *testing.T) {
	for _, l := range interopLayouts {
		t.Run(l.name, func(t *testing.T) {
			url := brokerURL(t) + l.query
			pyinterop.Python(t)
			q := transporttest.UniqueName("bqtest")
			cleanKeys(t, client(t), "*"+q+"*")
			pyinterop.Run(t, 60*time.Second, nil, pyinterop.Script(t, "redis_peer.py"), "produce", url, q, "1")
			pyinterop.Run(t, 60*time.Second, nil, pyinterop.Script(t, "redis_peer.py"), "fail-once", url, q)
			seen := runGo(t, url, q, 1)
			if seen[0].Attempts != 1 {
				t.Errorf("Go saw attempts %d after one Python failure, want 1", seen[0].Attempts)
			}
			assertDrained(t, l, q)
		})
	}
}

// TestInteropCrashRecovery: a worker of one SDK dies holding a reservation; a worker of
// the other SDK gets the message after retry_after.
func TestInteropCrashRecovery(t *testing.T) {
	for _, l := range interopLayouts {
		t.Run(l.name, func(t *testing.T) {
			url := brokerURL(t) + l.query
			pyinterop.Python(t)
			script := pyinterop.Script(t, "redis_peer.py")

			t.Run("PythonDiesGoRecovers", func(t *testing.T) {
				q := transporttest.UniqueName("bqtest")
				cleanKeys(t, client(t), "*"+q+"*")
				pyinterop.Run(t, 60*time.Second, nil, script, "produce", url, q, "1")
				pyinterop.Run(t, 60*time.Second, nil, script, "abandon", url, q)
				seen := runGo(t, url, q, 1)
				want := 0
				if l.name == "laravel" {
					want = 1 // Laravel's recovered reservation counts as an attempt
				}
				if seen[0].Attempts != want {
					t.Errorf("recovered message has attempts %d, want %d", seen[0].Attempts, want)
				}
				assertDrained(t, l, q)
			})

			t.Run("GoDiesPythonRecovers", func(t *testing.T) {
				q := transporttest.UniqueName("bqtest")
				cleanKeys(t, client(t), "*"+q+"*")
				ctx := ctxT(t)
				tr, err := transport.Open(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				body := envelope("go-crash")
				body = bytes.Replace(body, []byte(`urn:babel:test:redis`), []byte(interopURN), 1)
				if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body}); err != nil {
					t.Fatal(err)
				}
				c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
				if err != nil {
					t.Fatal(err)
				}
				transporttest.Receive(t, c, 10*time.Second)
				// The worker dies: its connection goes away without a settle or a Close.
				_ = tr.(*bqredis.Transport).Client().Close()
				rows := jsonLines(t, pyinterop.Run(t, 60*time.Second, nil, script, "consume", url, q, "1"))
				got := rows[0]["body"].(string)
				if l.name == "default" && got != string(body) {
					t.Errorf("python recovered %q, want %q", got, body)
				}
				if l.name == "laravel" && !strings.Contains(got, `"attempts":1`) {
					t.Errorf("python recovered %q, want Laravel's reserved copy (attempts 1)", got)
				}
				assertDrained(t, l, q)
			})
		})
	}
}
