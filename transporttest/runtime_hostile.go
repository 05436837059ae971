package transporttest

import (
	"bytes"
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
)

// The runtime cases of issue 22: bodies whose counters are at or past their limits.
// No input may make the runtime rewind the same delivery without bound: each of these
// settles on its first delivery.

// hostileEnvelope is a well-formed envelope for urn with the attempts member given
// as JSON text.
func hostileEnvelope(urn, attempts string) []byte {
	return []byte(`{"job":"` + urn + `","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"q","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":` + attempts + `}`)
}

// publishRaw writes body to queue as another SDK would, with the attempts header set to
// attempts where the binding has one (so header-authoritative brokers agree with the
// body).
func publishRaw(t *testing.T, tr transport.Transport, queue string, body []byte, attempts int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := tr.Publish(ctx, &transport.Message{Queue: queue, Body: body, Attempts: attempts, Projection: transport.Projection{
		URN: "urn:babel:orders:created", TraceID: "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
		MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567", Lang: "php", SchemaVersion: 1, CreatedAt: 1749132727000,
	}})
	if err != nil {
		t.Fatalf("publish to %q: %v", queue, err)
	}
}

// rtAttemptsAtMax: a body whose attempts is 2^63-1 and whose handler fails (or whose
// URN has no handler) is dead-lettered on its first delivery with the counter
// saturated, never rewound in a loop.
func rtAttemptsAtMax(t *testing.T, cfg Config) {
	const maxAttempts = "9223372036854775807"
	for _, tc := range []struct {
		name, urn, reason string
		handler           bool
	}{
		{"HandlerFails", "urn:babel:orders:created", "failed", true},
		{"NoHandler", "urn:babel:nobody:home", "unknown_urn", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, q := app(t, cfg, babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(3))
			var calls atomic.Int32
			if tc.handler {
				a.Handle(tc.urn, func(context.Context, *babelqueue.Message) error {
					calls.Add(1)
					return errors.New("payment gateway timeout")
				})
			}
			body := hostileEnvelope(tc.urn, maxAttempts)
			publishRaw(t, a.Transport(), q, body, math.MaxInt)
			stop := run(t, a)
			dead := drain(t, cfg, a.Transport(), a.DeadLetterQueue(), 1)
			// A hot loop would go on handling it meanwhile.
			time.Sleep(cfg.QuietPeriod)
			stop()
			if n := calls.Load(); tc.handler && n != 1 {
				t.Fatalf("the handler ran %d times for a body at attempts 2^63-1, want 1", n)
			}
			w := parse(t, dead[0])
			if w.DeadLetter == nil || w.DeadLetter.Reason != tc.reason || w.DeadLetter.Attempts != math.MaxInt64 || w.Attempts != math.MaxInt64 {
				t.Errorf("dead letter = %s, want reason %s and attempts saturated at %s", dead[0], tc.reason, maxAttempts)
			}
			if !bytes.Contains(dead[0], []byte(`"order_id":1042`)) {
				t.Errorf("the dead letter lost the body: %s", dead[0])
			}
			drain(t, cfg, a.Transport(), q, 0)
		})
	}
}

// rtPoisonAttempts: a poison body whose attempts member is a readable integer carries
// that count into the dead-letter block, as the Python SDK does.
func rtPoisonAttempts(t *testing.T, cfg Config) {
	a, q := app(t, cfg, babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(10))
	var calls atomic.Int32
	a.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error { calls.Add(1); return nil })
	// trace_id of the wrong type: poison, attempts still readable.
	body := []byte(`{"job":"urn:babel:orders:created","trace_id":5,"data":{},"meta":{"schema_version":1},"attempts":7}`)
	publishRaw(t, a.Transport(), q, body, 7)
	stop := run(t, a)
	dead := drain(t, cfg, a.Transport(), a.DeadLetterQueue(), 1)
	stop()
	if calls.Load() != 0 {
		t.Fatal("a poison body reached its handler")
	}
	w := parse(t, dead[0])
	if w.DeadLetter == nil || w.DeadLetter.Reason != "poison" || w.DeadLetter.Attempts != 7 {
		t.Errorf("poison dead letter = %s, want reason poison and the body's attempts 7", dead[0])
	}
	if !bytes.HasPrefix(dead[0], body[:len(body)-1]) {
		t.Errorf("the poison dead letter does not keep the body's bytes: %s", dead[0])
	}
	drain(t, cfg, a.Transport(), q, 0)
}

// rtNegativeAttemptsDeadLetter: an immediate dead-letter (on_unknown_urn = dead_letter)
// of a body with attempts -1 only appends dead_letter: the body's attempts stays -1.
func rtNegativeAttemptsDeadLetter(t *testing.T, cfg Config) {
	a, q := app(t, cfg, babelqueue.WithUnknownURN(babelqueue.UnknownDeadLetter))
	body := hostileEnvelope("urn:babel:nobody:home", "-1")
	publishRaw(t, a.Transport(), q, body, 0)
	stop := run(t, a)
	dead := drain(t, cfg, a.Transport(), a.DeadLetterQueue(), 1)
	stop()
	if !bytes.HasPrefix(dead[0], body[:len(body)-1]) || !bytes.Contains(dead[0], []byte(`"attempts":-1,"dead_letter":`)) {
		t.Errorf("dead-lettering rewrote the body; want the same bytes with dead_letter appended: %s", dead[0])
	}
	w := parse(t, dead[0])
	if w.DeadLetter == nil || w.DeadLetter.Reason != "unknown_urn" || w.DeadLetter.Attempts < 0 {
		t.Errorf("dead_letter block = %s, want reason unknown_urn and a count of at least 0", dead[0])
	}
	drain(t, cfg, a.Transport(), q, 0)
}
