package schema_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/schema"
	"github.com/babelqueue-go/babelqueue/schema/internal/schematest"

	_ "github.com/babelqueue-go/babelqueue/transport/redis"
)

// TestPythonVerdicts runs the keyword table through the Python SDK 1.24.0's validator.
// Where the table says "same" (every case its subset understands the way JSON Schema
// does) Python gives the Go verdict; every other row records, with its reason, the
// verdict Python gives instead.
func TestPythonVerdicts(t *testing.T) {
	cases := keywordCases(t)
	var in struct {
		Cases []map[string]json.RawMessage `json:"cases"`
	}
	for _, c := range cases {
		in.Cases = append(in.Cases, map[string]json.RawMessage{"name": mustJSON(t, c.Name), "schema": c.Schema, "data": c.Data})
	}
	lines := schematest.Python(t, in, "verdicts")
	if len(lines) != len(cases) {
		t.Fatalf("python answered %d cases of %d", len(lines), len(cases))
	}
	same := 0
	for i, c := range cases {
		var got struct {
			Name      string `json:"name"`
			Valid     bool   `json:"valid"`
			Violation string `json:"violation"`
		}
		if err := json.Unmarshal(lines[i], &got); err != nil || got.Name != c.Name {
			t.Fatalf("line %d: %s (%v)", i, lines[i], err)
		}
		want := c.Valid
		switch c.Python {
		case "same":
			same++
		case "valid", "invalid":
			want = c.Python == "valid"
			if want == c.Valid {
				t.Errorf("%s: the row says Python differs but gives the Go verdict", c.Name)
			}
		default:
			t.Fatalf("%s: python %q", c.Name, c.Python)
		}
		if got.Valid != want {
			t.Errorf("%s: Python says valid=%v (%s), the table says %v", c.Name, got.Valid, got.Violation, want)
		}
	}
	t.Logf("%d of %d cases: the same verdict in Go and Python", same, len(cases))
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRedisInvalidDeadLetteredOnFirstDelivery: a Python producer, which does not check,
// publishes invalid data to a real Redis; the Go consumer dead-letters it on its first
// delivery, with the violation in dead_letter.error, and never runs the handler.
func TestRedisInvalidDeadLetteredOnFirstDelivery(t *testing.T) {
	r := schematest.NewRedis(t)
	schematest.Python(t, map[string]any{"schema": nil, "data": map[string]any{"order_id": 0, "amount": 12.5}},
		"produce", r.URL, r.Queue, ordersURN, "-")

	app, rec := r.Consumer(t)
	app.Use(schema.Middleware(loadExamples(t)))
	var calls atomic.Int32
	app.Handle(ordersURN, func(context.Context, *babelqueue.Message) error { calls.Add(1); return nil })

	ev := schematest.RunUntilSettled(t, app, rec, 1)[0]
	var ve *schema.ValidationError
	if ev.Action != babelqueue.ActionDeadLetter || ev.Attempts != 1 || !errors.As(ev.Cause, &ve) {
		t.Fatalf("settled %s/%s attempts %d: %v", ev.Kind, ev.Action, ev.Attempts, ev.Cause)
	}
	if calls.Load() != 0 {
		t.Fatal("the handler ran")
	}
	dlq := r.Raw(t, r.Queue+".dlq")
	if len(dlq) != 1 {
		t.Fatalf("%d elements on %s.dlq", len(dlq), r.Queue)
	}
	var body struct {
		Meta       struct{ Lang string }
		DeadLetter struct {
			Reason string `json:"reason"`
			Error  string `json:"error"`
		} `json:"dead_letter"`
	}
	if err := json.Unmarshal(dlq[0], &body); err != nil {
		t.Fatal(err)
	}
	if body.Meta.Lang != "python" || body.DeadLetter.Reason != "failed" ||
		!strings.Contains(body.DeadLetter.Error, "/order_id") || !strings.Contains(body.DeadLetter.Error, `"minimum"`) {
		t.Fatalf("dead-lettered %s", dlq[0])
	}
	if left := r.Raw(t, r.Queue); len(left) != 0 {
		t.Fatalf("%d elements back on the queue: it was retried", len(left))
	}
}
