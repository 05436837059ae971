package babelqueue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// TestSettlementMatchesPythonSDK settles the same scenarios with the Python SDK
// (babelqueue==1.24.0, on its in-memory transport) and with this runtime, and compares
// what each leaves on the queue and the dead-letter queue: the bytes before the
// dead_letter member exactly, and the block's members except the ones that name the
// SDK (lang, exception) or the clock (failed_at). Poison error texts are each SDK's
// own words.
func TestSettlementMatchesPythonSDK(t *testing.T) {
	body := `{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042,"big":12345678901234567890123},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":0,"x":{"k":1}}`
	out := pyinterop.Run(t, 2*time.Minute, nil, pyinterop.Script(t, "runtime_dlq.py"), body)
	type result struct {
		Name  string   `json:"name"`
		DLQ   []string `json:"dlq"`
		Queue []string `json:"queue"`
	}
	python := map[string]result{}
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var r result
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("python output %q: %v", line, err)
		}
		python[r.Name] = r
	}
	failing := func(context.Context, *babelqueue.Message) error { return errors.New("payment gateway timeout") }
	for _, sc := range []struct {
		name     string
		body     string
		rounds   int
		register bool
		opts     []babelqueue.Option
	}{
		{"failed-exhausted", body, 3, true, []babelqueue.Option{babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(3)}},
		// A one-hour tier parks the retry so the runtime does not take it again.
		{"failed-once", body, 1, true, []babelqueue.Option{babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(3), babelqueue.WithRetryTiers(time.Hour)}},
		{"unknown-dead-letter", body, 1, false, []babelqueue.Option{babelqueue.WithUnknownURN(babelqueue.UnknownDeadLetter)}},
		{"unknown-fail-exhausted", body, 2, false, []babelqueue.Option{babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(2)}},
		{"unknown-release", body, 1, false, []babelqueue.Option{babelqueue.WithUnknownURN(babelqueue.UnknownRelease)}},
		{"poison-identity-less", `{"trace_id":"t","data":{"n":1e400}}`, 1, true, []babelqueue.Option{babelqueue.WithDeadLetter(true)}},
		{"poison-not-json", "not json", 1, true, []babelqueue.Option{babelqueue.WithDeadLetter(true)}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			py, ok := python[sc.name]
			if !ok {
				t.Fatalf("python printed no %q scenario", sc.name)
			}
			tr := memory.New()
			tr.Inject("orders", memory.Stored{Body: []byte(sc.body)})
			h := newHarness(t, tr, sc.opts...)
			if sc.register {
				h.app.Handle("urn:babel:orders:created", failing)
			}
			// One round per delivery, as the Python scenario runs max_messages=1 each time.
			h.run()
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) && len(tr.Messages("orders.dlq")) < len(py.DLQ) {
				time.Sleep(5 * time.Millisecond)
			}
			if sc.name == "unknown-release" || sc.name == "failed-once" {
				// Stop after the first settlement: wait for the re-published copy.
				for time.Now().Before(deadline) && !strings.Contains(h.logs.String(), "action=re") {
					time.Sleep(5 * time.Millisecond)
				}
			}
			h.stop()
			goDLQ := bodies(tr.Messages("orders.dlq"))
			if len(goDLQ) != len(py.DLQ) {
				t.Fatalf("DLQ: go wrote %d, python %d\ngo: %q\npy: %q", len(goDLQ), len(py.DLQ), goDLQ, py.DLQ)
			}
			for i := range goDLQ {
				compareDeadLetter(t, goDLQ[i], py.DLQ[i], strings.HasPrefix(sc.name, "poison"))
			}
			if sc.name == "unknown-release" || sc.name == "failed-once" {
				goQ := bodies(tr.Messages("orders"))
				if len(goQ) == 0 || len(py.Queue) != 1 || goQ[0] != py.Queue[0] {
					t.Errorf("re-published body differs:\ngo: %q\npy: %q", goQ, py.Queue)
				}
			}
		})
	}
}

func bodies(s []memory.Stored) []string {
	out := make([]string, len(s))
	for i, m := range s {
		out[i] = string(m.Body)
	}
	return out
}

func compareDeadLetter(t *testing.T, goBody, pyBody string, poison bool) {
	t.Helper()
	const member = `,"dead_letter":`
	gi, pi := strings.LastIndex(goBody, member), strings.LastIndex(pyBody, member)
	if gi < 0 || pi < 0 {
		t.Fatalf("no dead_letter member:\ngo: %s\npy: %s", goBody, pyBody)
	}
	if goBody[:gi] != pyBody[:pi] {
		t.Errorf("bytes before dead_letter differ:\ngo: %s\npy: %s", goBody[:gi], pyBody[:pi])
	}
	var g, p map[string]any
	if err := json.Unmarshal([]byte(goBody[gi+len(member):len(goBody)-1]), &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(pyBody[pi+len(member):len(pyBody)-1]), &p); err != nil {
		t.Fatal(err)
	}
	if g["lang"] != "go" || p["lang"] != "python" {
		t.Errorf("lang: go %v, python %v", g["lang"], p["lang"])
	}
	for _, k := range []string{"lang", "failed_at", "exception"} {
		if (g[k] == nil) != (p[k] == nil) {
			t.Errorf("%s: go %v, python %v", k, g[k], p[k])
		}
		delete(g, k)
		delete(p, k)
	}
	if poison {
		delete(g, "error")
		delete(p, "error")
	}
	gj, _ := json.Marshal(g)
	pj, _ := json.Marshal(p)
	if !bytes.Equal(gj, pj) {
		t.Errorf("dead_letter blocks differ:\ngo: %s\npy: %s", gj, pj)
	}
}
