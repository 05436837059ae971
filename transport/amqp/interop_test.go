package amqp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transport"
)

// peer runs scripts/py/amqp_peer.py with the Python SDK 1.24.0 and returns its JSON lines.
func peer(t *testing.T, stdin []byte, args ...string) []map[string]any {
	t.Helper()
	out := pyinterop.Run(t, 90*time.Second, stdin, pyinterop.Script(t, "amqp_peer.py"), args...)
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("python peer printed %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return lines
}

// goApp opens a runtime App on RabbitMQ for queue q.
func goApp(t *testing.T, q string, opts ...babelqueue.Option) *babelqueue.App {
	t.Helper()
	tr := openT(t)
	a, err := babelqueue.New(tr, append([]babelqueue.Option{babelqueue.WithQueue(q), babelqueue.WithLogger(testLogger(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return a
}

// runApp runs a until the returned stop is called (or the test ends).
func runApp(t *testing.T, a *babelqueue.App) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Error("Run did not return")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func str(v any) string { s, _ := v.(string); return s }

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }

// TestInteropGoToPython: envelopes the Go runtime publishes over RabbitMQ are handled by
// the Python SDK's worker, data, trace id, meta and out-of-band headers intact.
func TestInteropGoToPython(t *testing.T) {
	pyinterop.Python(t)
	q := newQueue(t)
	a := goApp(t, q)
	ctx := ctxT(t)
	ids := map[string]bool{}
	for i, data := range []map[string]any{{"order_id": 1042, "note": "café ☕"}, {"order_id": 7}} {
		var opts []babelqueue.PublishOption
		if i == 0 {
			opts = append(opts, babelqueue.WithHeaders(map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}))
		}
		id, err := a.Publish(ctx, "urn:babel:orders:created", data, opts...)
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	seen := peer(t, nil, "consume", brokerURL(t), q, "--urn", "urn:babel:orders:created")
	if len(seen) != 2 {
		t.Fatalf("python handled %d messages, want 2: %v", len(seen), seen)
	}
	for _, s := range seen {
		env, meta := obj(s["envelope"]), obj(s["meta"])
		if !ids[str(meta["id"])] || str(meta["lang"]) != "go" || str(meta["queue"]) != q {
			t.Errorf("python saw meta %v", meta)
		}
		if str(env["trace_id"]) == "" || env["attempts"] != float64(0) {
			t.Errorf("python saw envelope %v", env)
		}
		data := obj(s["data"])
		if data["order_id"] == float64(1042) {
			if data["note"] != "café ☕" {
				t.Errorf("data changed: %v", data)
			}
			if h := obj(s["headers"]); str(h["traceparent"]) != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
				t.Errorf("python did not get the traceparent header: %v", h)
			}
		}
	}
}

// TestInteropPythonToGo: envelopes the Python SDK publishes are handled by the Go
// runtime, with their headers, and the queue both declare is the same queue.
func TestInteropPythonToGo(t *testing.T) {
	pyinterop.Python(t)
	q := newQueue(t)
	in := `{"urn":"urn:babel:orders:created","data":{"order_id":1042},"headers":{"traceparent":"00-abc-01"},"trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"}
{"urn":"urn:babel:orders:created","data":{"order_id":7}}
`
	pub := peer(t, []byte(in), "publish", brokerURL(t), q)
	if len(pub) != 2 {
		t.Fatalf("python published %v", pub)
	}
	a := goApp(t, q)
	var (
		mu  sync.Mutex
		got []*babelqueue.Message
	)
	a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
		return nil
	})
	stop := runApp(t, a)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("Go handled %d of 2 Python messages", len(got))
	}
	for _, m := range got {
		var data struct {
			OrderID int `json:"order_id"`
		}
		if err := m.Bind(&data); err != nil {
			t.Fatal(err)
		}
		if m.Envelope.Meta.Lang != "python" || m.Attempts != 0 {
			t.Errorf("meta.lang %q attempts %d", m.Envelope.Meta.Lang, m.Attempts)
		}
		if data.OrderID == 1042 {
			if m.TraceID() != "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b" {
				t.Errorf("trace id %q", m.TraceID())
			}
			if m.Header("traceparent") != "00-abc-01" || len(m.Headers()) != 1 {
				t.Errorf("headers %v, want only traceparent", m.Headers())
			}
		}
	}
}

// TestInteropPythonDeadLettersReadByGo: the Python worker dead-letters a failing
// envelope and a poison body to <queue>.dlq; the Go transport reads both, the
// dead_letter blocks as the Python SDK wrote them and the original bytes kept.
func TestInteropPythonDeadLettersReadByGo(t *testing.T) {
	pyinterop.Python(t)
	q := newQueue(t)
	tr := openT(t)
	ctx := ctxT(t)
	a := goApp(t, q)
	if _, err := a.Publish(ctx, "urn:babel:orders:refused", map[string]any{"order_id": 9}); err != nil {
		t.Fatal(err)
	}
	poison := []byte(`{"job":"urn:babel:orders:created","data":[1,2],"n":1e400}`)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: poison}); err != nil {
		t.Fatal(err)
	}
	peer(t, nil, "consume", brokerURL(t), q, "--dead-letter", "--max-attempts", "2", "--fail", "urn:babel:orders:refused")

	c, err := tr.Consume(ctx, q+".dlq", transport.ConsumeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	reasons := map[string]map[string]any{}
	for range 2 {
		d := receive(t, c, 30*time.Second)
		var m map[string]any
		if err := json.Unmarshal(d.Body, &m); err != nil {
			// 1e400 does not fit a float64; look at the dead_letter member by hand.
			dec := json.NewDecoder(bytes.NewReader(d.Body))
			dec.UseNumber()
			if err := dec.Decode(&m); err != nil {
				t.Fatalf("python dead-letter body is not JSON: %q", d.Body)
			}
		}
		dl := obj(m["dead_letter"])
		reasons[str(dl["reason"])] = dl
		switch str(dl["reason"]) {
		case "poison":
			if !bytes.HasPrefix(d.Body, poison[:len(poison)-1]) {
				t.Errorf("poison dead-letter body does not keep the original bytes: %q", d.Body)
			}
		case "failed":
			if str(m["job"]) != "urn:babel:orders:refused" || !strings.Contains(str(dl["error"]), "python says no") {
				t.Errorf("failed dead-letter body %s", d.Body)
			}
		}
		if str(dl["original_queue"]) != q || str(dl["lang"]) != "python" {
			t.Errorf("dead_letter block %v", dl)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	if reasons["failed"] == nil || reasons["poison"] == nil {
		t.Fatalf("dead-letter reasons %v, want failed and poison", reasons)
	}
	if n := reasons["failed"]["attempts"]; n != float64(2) && n != json.Number("2") {
		t.Errorf("failed dead_letter.attempts = %v, want 2", n)
	}
}

// TestInteropGoDeadLettersReadByPython: the Go runtime dead-letters a failing envelope
// and a poison body; the Python SDK's RabbitMQ transport reads both from <queue>.dlq.
func TestInteropGoDeadLettersReadByPython(t *testing.T) {
	pyinterop.Python(t)
	q := newQueue(t)
	ctx := ctxT(t)
	a := goApp(t, q, babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(2))
	a.Handle("urn:babel:orders:refused", func(context.Context, *babelqueue.Message) error {
		return errors.New("go says no")
	})
	if _, err := a.Publish(ctx, "urn:babel:orders:refused", map[string]any{"order_id": 9}); err != nil {
		t.Fatal(err)
	}
	poison := []byte(`{"job":"urn:babel:orders:created","data":"not an object"}`)
	if err := a.Transport().Publish(ctx, &transport.Message{Queue: q, Body: poison}); err != nil {
		t.Fatal(err)
	}
	stop := runApp(t, a)
	ch := rawChannel(t, rawConn(t))
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := ch.QueueDeclare(q+".dlq", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if info.Messages >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d messages, want 2", q+".dlq", info.Messages)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	got := peer(t, nil, "drain", brokerURL(t), q+".dlq")
	if len(got) != 2 {
		t.Fatalf("python drained %d dead letters, want 2: %v", len(got), got)
	}
	reasons := map[string]bool{}
	for _, g := range got {
		dec := obj(g["decoded"])
		dl := obj(dec["dead_letter"])
		reasons[str(dl["reason"])] = true
		if str(dl["original_queue"]) != q || str(dl["lang"]) != "go" {
			t.Errorf("python read dead_letter %v", dl)
		}
		switch str(dl["reason"]) {
		case "failed":
			if g["accepts"] != true || str(dec["job"]) != "urn:babel:orders:refused" || dl["attempts"] != float64(2) {
				t.Errorf("python read the failed dead letter as %v (accepts %v)", dec, g["accepts"])
			}
			if !strings.Contains(str(dl["error"]), "go says no") {
				t.Errorf("dead_letter.error = %v", dl["error"])
			}
		case "poison":
			if !strings.HasPrefix(str(g["body"]), string(poison[:len(poison)-1])) {
				t.Errorf("poison body as python read it: %q", g["body"])
			}
		}
	}
	if !reasons["failed"] || !reasons["poison"] {
		t.Errorf("python read reasons %v, want failed and poison", reasons)
	}
}
