package pulsar_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// The Python SDK babelqueue==1.24.0 with its Pulsar extra is the peer of these tests;
// scripts/py/pulsar_peer.py drives it.

type pyCall struct {
	URN      string         `json:"urn"`
	Data     map[string]any `json:"data"`
	Meta     map[string]any `json:"meta"`
	Attempts int            `json:"attempts"`
}

type pyDrained struct {
	Body           string            `json:"body"`
	NativeAttempts int               `json:"native_attempts"`
	Headers        map[string]string `json:"headers"`
	RouteURN       string            `json:"route_urn"`
}

func pyLines[T any](t *testing.T, out []byte) []T {
	t.Helper()
	var res []T
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		if !bytes.HasPrefix(line, []byte("{")) {
			continue // the C++ Pulsar client under the SDK logs some lines to stdout
		}
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatalf("python peer wrote %q: %v", line, err)
		}
		res = append(res, v)
	}
	return res
}

func pyPeer(t *testing.T) string {
	t.Helper()
	pyinterop.Python(t)
	return pyinterop.Script(t, "pulsar_peer.py")
}

func newApp(t *testing.T, q string, opts ...babelqueue.Option) *babelqueue.App {
	t.Helper()
	tr := openTransport(t, "", fastNack())
	opts = append([]babelqueue.Option{babelqueue.WithQueue(q), babelqueue.WithLogger(quietLogger()), babelqueue.WithShutdownGrace(5 * time.Second)}, opts...)
	a, err := babelqueue.New(tr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// runUntil runs a until cond holds (or a minute passes) and stops it.
func runUntil(t *testing.T, a *babelqueue.App, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
	if !cond() {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Python publishes, the Go runtime consumes: the envelope decodes, the URN routes and
// the attempts start at zero.
func TestInteropPythonToGo(t *testing.T) {
	script := pyPeer(t)
	url := brokerURL(t)
	q := transporttest.UniqueName("bqtest-py2go")
	in := `{"urn":"urn:babel:orders:created","data":{"order_id":1042,"note":"café ☕"}}` + "\n" +
		`{"urn":"urn:babel:orders:shipped","data":{"order_id":1042}}` + "\n"
	ids := pyLines[struct{ ID string }](t, pyinterop.Run(t, 90*time.Second, []byte(in), script, "publish", url, q))
	if len(ids) != 2 {
		t.Fatalf("python published %d messages", len(ids))
	}
	a := newApp(t, q)
	var mu sync.Mutex
	got := map[string]*babelqueue.Message{}
	for _, urn := range []string{"urn:babel:orders:created", "urn:babel:orders:shipped"} {
		a.Handle(urn, func(_ context.Context, m *babelqueue.Message) error {
			mu.Lock()
			got[m.URN()] = m
			mu.Unlock()
			return nil
		})
	}
	runUntil(t, a, "both python messages", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	m := got["urn:babel:orders:created"]
	var v struct {
		OrderID int    `json:"order_id"`
		Note    string `json:"note"`
	}
	if err := m.Bind(&v); err != nil || v.OrderID != 1042 || v.Note != "café ☕" {
		t.Errorf("Bind = %+v, %v", v, err)
	}
	if m.Envelope.Meta.Lang != "python" || m.Attempts != 0 || m.ID() != ids[0].ID {
		t.Errorf("meta.lang %q, attempts %d, id %s (python said %s)", m.Envelope.Meta.Lang, m.Attempts, m.ID(), ids[0].ID)
	}
	if len(m.Headers()) != 0 {
		t.Errorf("bq- properties leaked into headers: %v", m.Headers())
	}
}

// The Go runtime publishes, the Python SDK's worker consumes.
func TestInteropGoToPython(t *testing.T) {
	script := pyPeer(t)
	url := brokerURL(t)
	q := transporttest.UniqueName("bqtest-go2py")
	a := newApp(t, q)
	id, err := a.Publish(context.Background(), "urn:babel:orders:created", map[string]any{"order_id": 7, "big": json.Number("12345678901234567890")})
	if err != nil {
		t.Fatal(err)
	}
	calls := pyLines[pyCall](t, pyinterop.Run(t, 90*time.Second, nil, script, "consume", url, q, "--urn", "urn:babel:orders:created", "--max-messages", "1"))
	if len(calls) != 1 {
		t.Fatalf("python handled %d messages, want 1", len(calls))
	}
	c := calls[0]
	if c.URN != "urn:babel:orders:created" || c.Data["order_id"] != float64(7) || c.Meta["lang"] != "go" || c.Meta["id"] != id || c.Attempts != 0 {
		t.Errorf("python saw %+v", c)
	}
}

// A retry crosses the SDKs: the Python worker's handler fails, the SDK re-publishes the
// message with attempts+1, and the Go runtime then handles it with Attempts 1.
func TestInteropPythonRetryReachesGo(t *testing.T) {
	script := pyPeer(t)
	url := brokerURL(t)
	q := transporttest.UniqueName("bqtest-pyretry")
	a := newApp(t, q)
	id, err := a.Publish(context.Background(), "urn:babel:orders:created", map[string]any{"order_id": 9})
	if err != nil {
		t.Fatal(err)
	}
	calls := pyLines[pyCall](t, pyinterop.Run(t, 90*time.Second, nil, script, "consume", url, q, "--fail", "urn:babel:orders:created", "--max-messages", "1"))
	if len(calls) != 1 || calls[0].Attempts != 0 {
		t.Fatalf("python handled %+v, want one call at attempts 0", calls)
	}
	var seen []int
	var mu sync.Mutex
	a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.ID() == id {
			seen = append(seen, m.Attempts)
		}
		return nil
	})
	runUntil(t, a, "the retried message", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) > 0 })
	if seen[0] != 1 {
		t.Errorf("Go saw attempts %v after one python failure, want 1", seen)
	}
}

// The Go runtime retries and dead-letters; the Python SDK reads the dead letter with
// the attempts the Go side counted, routed by the bq-job property.
func TestInteropGoDeadLetterReadByPython(t *testing.T) {
	script := pyPeer(t)
	url := brokerURL(t)
	q := transporttest.UniqueName("bqtest-godlq")
	a := newApp(t, q, babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(2))
	var mu sync.Mutex
	n := 0
	a.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		mu.Lock()
		n++
		mu.Unlock()
		return errors.New("go handler fails")
	})
	if _, err := a.Publish(context.Background(), "urn:babel:orders:created", map[string]any{"order_id": 11}, babelqueue.WithKey([]byte("order-11"))); err != nil {
		t.Fatal(err)
	}
	runUntil(t, a, "two attempts", func() bool { mu.Lock(); defer mu.Unlock(); return n >= 2 })
	// The dead letter keeps the key (read on a second subscription: the Python SDK's
	// ReceivedMessage does not carry Pulsar keys).
	if raw := rawReceive(t, rawSubscribe(t, rawClient(t), a.DeadLetterQueue())); raw.Key() != "order-11" {
		t.Errorf("dead letter key = %q, want order-11", raw.Key())
	}
	dead := pyLines[pyDrained](t, pyinterop.Run(t, 90*time.Second, nil, script, "drain", url, a.DeadLetterQueue()))
	if len(dead) != 1 {
		t.Fatalf("python drained %d dead letters, want 1", len(dead))
	}
	d := dead[0]
	var w struct {
		Attempts   int `json:"attempts"`
		DeadLetter struct {
			Reason, OriginalQueue, Lang string
			Attempts                    int
		} `json:"dead_letter"`
	}
	if err := json.Unmarshal([]byte(d.Body), &w); err != nil {
		t.Fatal(err)
	}
	if w.DeadLetter.Reason != "failed" || w.DeadLetter.Attempts != 2 || w.Attempts != 2 {
		t.Errorf("dead letter body %s", d.Body)
	}
	if d.NativeAttempts != 2 || d.RouteURN != "urn:babel:orders:created" {
		t.Errorf("python read native_attempts %d, route %q", d.NativeAttempts, d.RouteURN)
	}
}
