package babelqueue_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// TestEveryRowEndToEnd drives one delivery per row of docs/settlement.md through the
// runtime on memory:// (with another broker's capabilities where the row is a
// per-transport exception) and checks where it ends up: acknowledged and gone,
// re-published (parked on a one-hour retry tier so it is not taken again), on the DLQ,
// or handed to the broker's own redrive.
func TestEveryRowEndToEnd(t *testing.T) {
	var (
		plain = transport.Capabilities{Delay: true}
		redis = transport.Capabilities{Delay: true, PoisonAlwaysDeadLetter: true}
		sqs   = transport.Capabilities{Delay: true, HandOff: true, SchemaGate: true, Attempts: transport.AttemptsMaxNative, DeadLetterSuffix: "-dlq"}
		kafka = transport.Capabilities{Delay: true, PoisonNeedsRetryTiers: true, SchemaGate: true, Attempts: transport.AttemptsHeaderAuthoritative}
		park  = babelqueue.WithRetryTiers(time.Hour)
		dlqOn = babelqueue.WithDeadLetter(true)
	)
	const (
		known   = "urn:babel:orders:created"
		poison  = `{"trace_id":"t","data":{"order_id":1}}`
		atMax   = `"attempts":2`
		handled = "handled"
		failing = "failing"
		noRetry = "noretry"
		requeue = "requeue"
	)
	type where struct {
		queue    int    // messages waiting on the work queue afterwards
		attempts string // the re-published body's attempts member, when queue is 1
		dlq      string // the dead_letter reason on the DLQ, "raw" for an unchanged body, "" for none
		dlqHas   string // a piece of the dead-lettered body, when set
		handOff  bool
		saw      string // the attempts the handler saw, when set
	}
	for _, tc := range []struct {
		name    string
		caps    transport.Capabilities
		opts    []babelqueue.Option
		body    string
		stored  memory.Stored
		handler string // "handled", "failing", "noretry", "requeue" or "" (no handler: unknown URN)
		want    where
		settled string // the observer's "kind/action"
	}{
		{"handler returns nil: ack", plain, nil, good, memory.Stored{}, handled, where{}, "handled/ack"},
		{"handler fails: retry with attempts+1", plain, []babelqueue.Option{park}, good, memory.Stored{}, failing, where{queue: 1, attempts: `"attempts":1`}, "failed/retry"},
		{"handler fails at max, DLQ on: dead-letter failed", plain, []babelqueue.Option{dlqOn}, strings.Replace(good, `"attempts":0`, atMax, 1), memory.Stored{}, failing, where{dlq: "failed"}, "failed/dead_letter"},
		{"handler fails at max, DLQ off: drop", plain, nil, strings.Replace(good, `"attempts":0`, atMax, 1), memory.Stored{}, failing, where{}, "failed/drop"},
		{"unknown URN, delete: drop", plain, []babelqueue.Option{babelqueue.WithUnknownURN(babelqueue.UnknownDelete), dlqOn}, good, memory.Stored{}, "", where{}, "unknown_urn/drop"},
		{"unknown URN, release: re-published unchanged", plain, []babelqueue.Option{babelqueue.WithUnknownURN(babelqueue.UnknownRelease)}, good, memory.Stored{}, "", where{queue: 1, attempts: `"attempts":0`}, "unknown_urn/release"},
		{"unknown URN, dead_letter: dead-letter unknown_urn", plain, []babelqueue.Option{babelqueue.WithUnknownURN(babelqueue.UnknownDeadLetter)}, good, memory.Stored{}, "", where{dlq: "unknown_urn"}, "unknown_urn/dead_letter"},
		{"unknown URN, fail: retried", plain, []babelqueue.Option{park, dlqOn}, good, memory.Stored{}, "", where{queue: 1, attempts: `"attempts":1`}, "unknown_urn/retry"},
		{"unknown URN, fail, exhausted: unknown_urn", plain, []babelqueue.Option{dlqOn}, strings.Replace(good, `"attempts":0`, atMax, 1), memory.Stored{}, "", where{dlq: "unknown_urn"}, "unknown_urn/dead_letter"},
		{"poison, delete: drop even with DLQ on", plain, []babelqueue.Option{babelqueue.WithUnknownURN(babelqueue.UnknownDelete), dlqOn}, poison, memory.Stored{}, handled, where{}, "poison/drop"},
		{"poison, DLQ on: dead-letter poison", plain, []babelqueue.Option{dlqOn}, poison, memory.Stored{}, handled, where{dlq: "poison"}, "poison/poison_dead_letter"},
		{"poison, DLQ off: bounded re-publish", plain, []babelqueue.Option{park}, poison, memory.Stored{}, handled, where{queue: 1}, "poison/poison_retry"},
		{"poison, DLQ off, at max: drop", plain, nil, poison, memory.Stored{Attempts: 2}, handled, where{}, "poison/drop"},
		{"redis: poison, DLQ off: dead-lettered anyway", redis, nil, poison, memory.Stored{}, handled, where{dlq: "poison"}, "poison/poison_dead_letter"},
		{"sqs/sb: poison, DLQ off: handed to the broker", sqs, nil, poison, memory.Stored{}, handled, where{handOff: true}, "poison/handoff"},
		{"kafka: poison, DLQ off, no tiers: committed and dropped", kafka, nil, poison, memory.Stored{}, handled, where{}, "poison/drop"},
		{"kafka: poison, DLQ off, tiers: bounded re-publish", kafka, []babelqueue.Option{park}, poison, memory.Stored{}, handled, where{queue: 1}, "poison/poison_retry"},
		{"gate, delete: drop", kafka, []babelqueue.Option{babelqueue.WithUnknownURN(babelqueue.UnknownDelete), dlqOn}, good, memory.Stored{SchemaVersion: "2"}, handled, where{}, "schema_rejected/drop"},
		{"gate, DLQ on: raw body to the DLQ", kafka, []babelqueue.Option{dlqOn}, good, memory.Stored{SchemaVersion: "01"}, handled, where{dlq: "raw"}, "schema_rejected/raw_dead_letter"},
		{"gate, DLQ off, kafka/artemis: drop", kafka, nil, good, memory.Stored{SchemaVersion: "x"}, handled, where{}, "schema_rejected/drop"},
		{"gate, DLQ off, sqs/sb: handed to the broker", sqs, nil, good, memory.Stored{SchemaVersion: "2"}, handled, where{handOff: true}, "schema_rejected/handoff"},
		{"gate passes \"1\": handled", kafka, nil, good, memory.Stored{SchemaVersion: "1"}, handled, where{}, "handled/ack"},
		{"handler says no retry, DLQ on: dead-letter failed at once", plain, []babelqueue.Option{dlqOn, park}, good, memory.Stored{}, noRetry, where{dlq: "failed"}, "unretryable/dead_letter"},
		{"handler says no retry, DLQ off: drop", plain, []babelqueue.Option{park}, good, memory.Stored{}, noRetry, where{}, "unretryable/drop"},
		{"handler requeues: re-published unchanged, attempts kept", plain, nil, good, memory.Stored{}, requeue, where{queue: 1, attempts: `"attempts":0`}, "requeued/release"},
		{"attempts at MaxInt, handler fails, DLQ on: dead-lettered now", plain, []babelqueue.Option{dlqOn, park}, strings.Replace(good, `"attempts":0`, `"attempts":9223372036854775807`, 1), memory.Stored{}, failing, where{dlq: "failed"}, "failed/dead_letter"},
		{"attempts at MaxInt, handler fails, DLQ off: dropped now", plain, []babelqueue.Option{park}, strings.Replace(good, `"attempts":0`, `"attempts":9223372036854775807`, 1), memory.Stored{}, failing, where{}, "failed/drop"},
		{"attempts at MaxInt, unknown URN, DLQ on: dead-lettered now", plain, []babelqueue.Option{dlqOn, park}, strings.Replace(good, `"attempts":0`, `"attempts":9223372036854775807`, 1), memory.Stored{}, "", where{dlq: "unknown_urn"}, "unknown_urn/dead_letter"},
		{"poison with a readable attempts at max, DLQ off: drop", plain, []babelqueue.Option{park}, `{"trace_id":"t","attempts":2}`, memory.Stored{}, handled, where{}, "poison/drop"},

		// A negative attempts (docs/settlement.md): the handler sees it as written and the
		// retry counts on from it, as in the Python SDK; what the runtime writes is never
		// below 0.
		{"attempts -1, handler fails: handler sees -1, retry re-published with attempts 0", plain, []babelqueue.Option{park, dlqOn}, minus("-1"), memory.Stored{}, failing, where{queue: 1, attempts: `"attempts":0`, saw: "-1"}, "failed/retry"},
		{"attempts -1, max_attempts 1: retried once, as Python", plain, []babelqueue.Option{park, dlqOn, babelqueue.WithMaxAttempts(1)}, minus("-1"), memory.Stored{}, failing, where{queue: 1, attempts: `"attempts":0`, saw: "-1"}, "failed/retry"},
		{"attempts -5, handler fails: retry re-published with attempts 0, never negative", plain, []babelqueue.Option{park, dlqOn}, minus("-5"), memory.Stored{}, failing, where{queue: 1, attempts: `"attempts":0`, saw: "-5"}, "failed/retry"},
		{"attempts -1, unknown URN, dead_letter: body kept, the block records 0", plain, []babelqueue.Option{babelqueue.WithUnknownURN(babelqueue.UnknownDeadLetter)}, minus("-1"), memory.Stored{}, "", where{dlq: "unknown_urn", dlqHas: `"attempts":-1,"x-extra":{"kept":true},"dead_letter":{"reason":"unknown_urn","error":null,"exception":null,"failed_at":`}, "unknown_urn/dead_letter"},
		{"attempts -1, unknown URN, release: re-published unchanged", plain, []babelqueue.Option{babelqueue.WithUnknownURN(babelqueue.UnknownRelease)}, minus("-1"), memory.Stored{}, "", where{queue: 1, attempts: `"attempts":-1`}, "unknown_urn/release"},
		{"attempts -1, handler says no retry: dead-lettered with attempts 0", plain, []babelqueue.Option{dlqOn}, minus("-1"), memory.Stored{}, noRetry, where{dlq: "failed", dlqHas: `"original_queue":"orders","attempts":0,`, saw: "-1"}, "unretryable/dead_letter"},
		{"kafka: bq-attempts header -1 is authoritative: handler sees -1", kafka, []babelqueue.Option{park}, good, memory.Stored{Attempts: -1}, failing, where{queue: 1, attempts: `"attempts":0`, saw: "-1"}, "failed/retry"},
		{"sqs/sb/pulsar/artemis: attempts -1 on a first delivery is max(-1, native 0) = 0", sqs, []babelqueue.Option{park}, minus("-1"), memory.Stored{}, failing, where{queue: 1, attempts: `"attempts":1`, saw: "0"}, "failed/retry"},
		{"poison with attempts -1, DLQ on: the block records 0", plain, []babelqueue.Option{dlqOn}, `{"trace_id":"t","attempts":-1}`, memory.Stored{}, handled, where{dlq: "poison", dlqHas: `"attempts":0,"lang":"go"`}, "poison/poison_dead_letter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := memory.New(memory.WithCapabilities(tc.caps))
			h := newHarness(t, tr, tc.opts...)
			calls, saw := 0, ""
			switch tc.handler {
			case handled:
				h.app.Handle(known, func(context.Context, *babelqueue.Message) error { calls++; return nil })
			case failing:
				h.app.Handle(known, func(_ context.Context, m *babelqueue.Message) error {
					calls++
					saw = strconv.Itoa(m.Attempts)
					return errors.New("no")
				})
			case noRetry:
				h.app.Handle(known, func(_ context.Context, m *babelqueue.Message) error {
					calls++
					saw = strconv.Itoa(m.Attempts)
					return babelqueue.NoRetry(errors.New("order has no lines"))
				})
			case requeue:
				h.app.Handle(known, func(context.Context, *babelqueue.Message) error {
					calls++
					return babelqueue.Requeue(time.Hour, errors.New("claimed elsewhere"))
				})
			}
			h.inject(tc.body, tc.stored)
			h.run()
			ev := h.rec.WaitSettled(t, 1, 10*time.Second)[0]
			h.stop()
			if got := string(ev.Kind) + "/" + string(ev.Action); got != tc.settled {
				t.Errorf("observer saw %s, want %s", got, tc.settled)
			}
			if ev.Err != nil {
				t.Errorf("settlement failed: %v", ev.Err)
			}
			dlqName := h.app.DeadLetterQueue()
			queue, dlq, off := tr.Messages("orders"), tr.Messages(dlqName), tr.HandedOff("orders")
			if len(queue) != tc.want.queue {
				t.Errorf("work queue holds %d, want %d", len(queue), tc.want.queue)
			}
			if tc.want.queue == 1 && len(queue) == 1 {
				if tc.want.attempts != "" && !strings.Contains(string(queue[0].Body), tc.want.attempts) {
					t.Errorf("re-published body %s lacks %s", queue[0].Body, tc.want.attempts)
				}
				if tc.body == poison && (string(queue[0].Body) != poison || queue[0].Attempts != 1) {
					t.Errorf("poison re-published as %q with attempts header %d, want the same bytes and 1", queue[0].Body, queue[0].Attempts)
				}
			}
			switch {
			case tc.want.dlq == "" && len(dlq) != 0:
				t.Errorf("DLQ %s holds %q, want nothing", dlqName, dlq[0].Body)
			case tc.want.dlq == "raw" && (len(dlq) != 1 || string(dlq[0].Body) != tc.body):
				t.Errorf("DLQ should hold the body unchanged, holds %v", bodies(dlq))
			case tc.want.dlq != "" && tc.want.dlq != "raw" && (len(dlq) != 1 || !strings.Contains(string(dlq[0].Body), `"dead_letter":{"reason":"`+tc.want.dlq+`"`)):
				t.Errorf("DLQ should hold one %s dead letter, holds %v", tc.want.dlq, bodies(dlq))
			}
			if tc.want.dlqHas != "" && (len(dlq) != 1 || !strings.Contains(string(dlq[0].Body), tc.want.dlqHas)) {
				t.Errorf("DLQ should hold a body with %s, holds %v", tc.want.dlqHas, bodies(dlq))
			}
			if tc.want.saw != "" && saw != tc.want.saw {
				t.Errorf("the handler saw attempts %q, want %s", saw, tc.want.saw)
			}
			if tc.want.handOff != (len(off) == 1) {
				t.Errorf("handed off %d, want handOff=%v", len(off), tc.want.handOff)
			}
			if (tc.body == poison || tc.stored.SchemaVersion != nil && tc.stored.SchemaVersion != "1") && calls != 0 {
				t.Errorf("handler ran for a poison or gate-rejected delivery")
			}
		})
	}
}

// minus is the good envelope with its attempts member written as n.
func minus(n string) string { return strings.Replace(good, `"attempts":0`, `"attempts":`+n, 1) }
