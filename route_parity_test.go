package babelqueue_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// routeCase is one body and where each SDK's runtime sends it with dead_letter on,
// max_attempts 3 and a handler for urn:babel:orders:created that succeeds: "handled",
// "poison", "unknown_urn" (a dead-letter reason), or the like. Where the two differ the
// case says why, and envelope/PARITY.md records it.
type routeCase struct {
	name, body string
	goOutcome  string
	pyOutcome  string
	why        string
}

const parityEnv = `"trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"python","schema_version":1,"created_at":1749132727000}`

var routeCases = []routeCase{
	{"accepted", `{"job":"urn:babel:orders:created",` + parityEnv + `,"data":{"order_id":1042},"attempts":0}`, "handled", "handled", ""},
	{"unknown-urn", `{"job":"urn:babel:nobody:home",` + parityEnv + `,"data":{},"attempts":2}`, "unknown_urn", "unknown_urn", ""},
	{"integer-beyond-2^53-in-data", `{"job":"urn:babel:orders:created",` + parityEnv + `,"data":{"id":9007199254740993},"attempts":0}`, "handled", "handled", ""},
	{"wrong-type", `{"job":"urn:babel:orders:created","trace_id":5,"data":{},"meta":{"schema_version":1},"attempts":0}`, "poison", "poison", ""},
	// A number in data that is not a finite double.
	{"1e400-in-data", `{"job":"urn:babel:orders:created",` + parityEnv + `,"data":{"amount":1e400},"attempts":0}`, "handled", "poison",
		"SPEC §1 keeps such numbers as written and §2's poison list (seed: not UTF-8, not JSON, not an object, a member of the wrong type, no identity) does not name them: data is an object, so the body is handled. Python 1.24.0 decodes data to floats and calls it poison."},
	// Envelopes that decode but fail Accepts.
	{"schema-version-2", `{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"schema_version":2},"attempts":0}`, "poison", "handled", whyAccepts},
	{"trace-id-missing", `{"job":"urn:babel:orders:created","data":{},"meta":{"schema_version":1},"attempts":0}`, "poison", "handled", whyAccepts},
	{"trace-id-blank", `{"job":"urn:babel:orders:created","trace_id":" ","data":{},"meta":{"schema_version":1},"attempts":0}`, "poison", "handled", whyAccepts},
	{"data-null", `{"job":"urn:babel:orders:created","trace_id":"t","data":null,"meta":{"schema_version":1},"attempts":0}`, "poison", "handled", whyAccepts},
	{"meta-missing", `{"job":"urn:babel:orders:created","trace_id":"t","data":{},"attempts":0}`, "poison", "handled", whyAccepts},
	{"attempts-missing", `{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"schema_version":1}}`, "poison", "handled", whyAccepts},
}

const whyAccepts = "SPEC §1 Accepts: a consumer accepts an envelope only with a URN, meta.schema_version 1, a data object and a non-blank trace_id; " +
	"Go never hands such an envelope to a handler and routes it as poison (no retry can change it). Python 1.24.0 does not call accepts when it dispatches, and runs the handler."

// goOutcome runs body through the Go runtime on memory:// and reports where it went.
func goOutcome(t *testing.T, body string) string {
	t.Helper()
	tr := memory.New()
	rec := transporttest.NewRecorder()
	a, err := babelqueue.New(tr, babelqueue.WithQueue("orders"), babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(3),
		babelqueue.WithObserver(rec), babelqueue.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	handled := make(chan struct{}, 1)
	a.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		handled <- struct{}{}
		return nil
	})
	if err := tr.Publish(context.Background(), &transport.Message{Queue: "orders", Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	rec.WaitSettled(t, 1, 10*time.Second)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	select {
	case <-handled:
		return "handled"
	default:
	}
	dead := tr.Messages("orders.dlq")
	if len(dead) == 1 {
		var w struct {
			DeadLetter struct {
				Reason string `json:"reason"`
			} `json:"dead_letter"`
		}
		if err := json.Unmarshal(dead[0].Body, &w); err == nil {
			return w.DeadLetter.Reason
		}
		return "dead_letter"
	}
	if len(tr.Messages("orders")) > 0 {
		return "requeued"
	}
	return "dropped"
}

// TestMixedFleetRouting runs each body through both runtimes and checks each SDK's
// outcome against the table: a difference that is not in the table, or an entry that no
// longer differs, fails.
func TestMixedFleetRouting(t *testing.T) {
	var in bytes.Buffer
	for _, c := range routeCases {
		line, _ := json.Marshal(map[string]string{"name": c.name, "b64": base64.StdEncoding.EncodeToString([]byte(c.body))})
		in.Write(append(line, '\n'))
	}
	out := pyinterop.Run(t, 2*time.Minute, in.Bytes(), pyinterop.Script(t, "route_outcome.py"))
	py := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct{ Name, Outcome string }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("python printed %q: %v", sc.Text(), err)
		}
		py[r.Name] = r.Outcome
	}
	for _, c := range routeCases {
		t.Run(c.name, func(t *testing.T) {
			if got := goOutcome(t, c.body); got != c.goOutcome {
				t.Errorf("Go runtime: %s, want %s", got, c.goOutcome)
			}
			if py[c.name] != c.pyOutcome {
				t.Errorf("Python 1.24.0 runtime: %s, the table says %s (update the table and envelope/PARITY.md)", py[c.name], c.pyOutcome)
			}
			if (c.goOutcome != c.pyOutcome) != (c.why != "") {
				t.Errorf("a difference between the SDKs must say why, and only a difference: %+v", c)
			}
		})
	}
}

// attemptsCase is one body whose attempts each SDK counts, with dead-lettering on and a
// handler for urn:babel:orders:created that always fails: the outcome lists the attempts
// the handler saw on each delivery and the dead_letter.attempts written at the end.
// Where the two differ the case says why, and envelope/PARITY.md records it.
type attemptsCase struct {
	name         string
	attempts     string // the body's attempts member, as written
	job          string
	maxAttempts  int
	onUnknownURN babelqueue.UnknownURNStrategy
	goOutcome    string
	pyOutcome    string
	why          string
}

const whyNegativeWrite = "SPEC §1 (attempts ≥ 0) and the envelope schema (minimum 0 for attempts and dead_letter.attempts) bind what a runtime writes. " +
	"Go reads the negative count as written and counts on from it, as Python does, but never writes a count below 0"

var attemptsCases = []attemptsCase{
	{"zero", "0", "urn:babel:orders:created", 3, babelqueue.UnknownFail, "saw=0,1,2 dead_letter.attempts=3", "saw=0,1,2 dead_letter.attempts=3", ""},
	{"minus-one", "-1", "urn:babel:orders:created", 3, babelqueue.UnknownFail, "saw=-1,0,1,2 dead_letter.attempts=3", "saw=-1,0,1,2 dead_letter.attempts=3", ""},
	{"minus-one-max-1", "-1", "urn:babel:orders:created", 1, babelqueue.UnknownFail, "saw=-1,0 dead_letter.attempts=1", "saw=-1,0 dead_letter.attempts=1", ""},
	{"minus-five", "-5", "urn:babel:orders:created", 3, babelqueue.UnknownFail, "saw=-5,0,1,2 dead_letter.attempts=3", "saw=-5,-4,-3,-2,-1,0,1,2 dead_letter.attempts=3",
		whyNegativeWrite + ": its retry of -5 writes 0 where Python writes -4, so max_attempts bounds the deliveries (a body that says -2^63 would otherwise be retried for ever)."},
	{"minus-one-unknown-dead-letter", "-1", "urn:babel:nobody:home", 3, babelqueue.UnknownDeadLetter, "saw= dead_letter.attempts=0", "saw= dead_letter.attempts=-1",
		whyNegativeWrite + ": an immediate dead letter records 0 where Python copies the body's -1 into the block (the body's own attempts stays -1 in both)."},
}

// goAttemptsOutcome runs one attemptsCase through the Go runtime on memory://.
func goAttemptsOutcome(t *testing.T, c attemptsCase) string {
	t.Helper()
	tr := memory.New()
	a, err := babelqueue.New(tr, babelqueue.WithQueue("orders"), babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(c.maxAttempts),
		babelqueue.WithUnknownURN(c.onUnknownURN), babelqueue.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	saw := make(chan int, 64)
	a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		saw <- m.Attempts
		return errors.New("payment gateway timeout")
	})
	body := `{"job":"` + c.job + `",` + parityEnv + `,"data":{"order_id":1042},"attempts":` + c.attempts + `}`
	if err := tr.Publish(context.Background(), &transport.Message{Queue: "orders", Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(tr.Messages("orders.dlq")) == 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	close(saw)
	var seen []string
	for n := range saw {
		seen = append(seen, strconv.Itoa(n))
	}
	block := "none"
	if dead := tr.Messages("orders.dlq"); len(dead) == 1 {
		var w struct {
			DeadLetter struct {
				Attempts json.Number `json:"attempts"`
			} `json:"dead_letter"`
		}
		if err := json.Unmarshal(dead[0].Body, &w); err != nil {
			t.Fatal(err)
		}
		block = w.DeadLetter.Attempts.String()
	}
	return "saw=" + strings.Join(seen, ",") + " dead_letter.attempts=" + block
}

// TestNegativeAttemptsAgainstPython counts a body's attempts in both runtimes until it
// is dead-lettered (docs/settlement.md, "A negative attempts"), and checks each SDK's
// outcome against the table.
func TestNegativeAttemptsAgainstPython(t *testing.T) {
	var in bytes.Buffer
	for _, c := range attemptsCases {
		body := `{"job":"` + c.job + `",` + parityEnv + `,"data":{"order_id":1042},"attempts":` + c.attempts + `}`
		line, _ := json.Marshal(map[string]any{"name": c.name, "b64": base64.StdEncoding.EncodeToString([]byte(body)),
			"max_attempts": c.maxAttempts, "on_unknown_urn": c.onUnknownURN.String()})
		in.Write(append(line, '\n'))
	}
	out := pyinterop.Run(t, 2*time.Minute, in.Bytes(), pyinterop.Script(t, "attempts_trace.py"))
	py := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct{ Name, Outcome string }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("python printed %q: %v", sc.Text(), err)
		}
		py[r.Name] = r.Outcome
	}
	for _, c := range attemptsCases {
		t.Run(c.name, func(t *testing.T) {
			if got := goAttemptsOutcome(t, c); got != c.goOutcome {
				t.Errorf("Go runtime: %s, want %s", got, c.goOutcome)
			}
			if py[c.name] != c.pyOutcome {
				t.Errorf("Python 1.24.0 runtime: %s, the table says %s (update the table and envelope/PARITY.md)", py[c.name], c.pyOutcome)
			}
			if (c.goOutcome != c.pyOutcome) != (c.why != "") {
				t.Errorf("a difference between the SDKs must say why, and only a difference: %+v", c)
			}
		})
	}
}
