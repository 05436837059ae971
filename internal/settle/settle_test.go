package settle

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// TestDecide is the settlement rule of docs/settlement.md as a table: one row per rule and per-transport exception.
func TestDecide(t *testing.T) {
	var (
		plain  = transport.Capabilities{}
		redis  = transport.Capabilities{PoisonAlwaysDeadLetter: true}
		sqs    = transport.Capabilities{HandOff: true, SchemaGate: true, Delay: true, MaxDelay: 15 * time.Minute}
		kafka  = transport.Capabilities{PoisonNeedsRetryTiers: true, SchemaGate: true, Delay: true}
		tiers  = []time.Duration{time.Second, 5 * time.Second}
		off    = Policy{MaxAttempts: 3}
		on     = Policy{MaxAttempts: 3, DeadLetter: true}
		del    = Policy{MaxAttempts: 3, OnUnknownURN: UnknownDelete}
		delOn  = Policy{MaxAttempts: 3, DeadLetter: true, OnUnknownURN: UnknownDelete}
		rel    = Policy{MaxAttempts: 3, OnUnknownURN: UnknownRelease}
		dlqURN = Policy{MaxAttempts: 3, OnUnknownURN: UnknownDeadLetter}
		tiered = Policy{MaxAttempts: 3, RetryTiers: tiers}
	)
	for _, tc := range []struct {
		name string
		f    Facts
		p    Policy
		c    transport.Capabilities
		want Decision
	}{
		// handler returns nil
		{"handled: ack", Facts{Kind: Handled}, on, plain, Decision{Action: ActAck}},
		{"handled on a retry: ack", Facts{Kind: Handled, Attempts: 2}, off, plain, Decision{Action: ActAck}},

		// handler fails
		{"failed first time: retry with attempts 1", Facts{Kind: Failed}, off, plain, Decision{Action: ActRetry, Attempts: 1}},
		{"failed second time: retry with attempts 2", Facts{Kind: Failed, Attempts: 1}, on, plain, Decision{Action: ActRetry, Attempts: 2}},
		{"failed at max, DLQ on: dead-letter failed", Facts{Kind: Failed, Attempts: 2}, on, plain, Decision{Action: ActDeadLetter, Reason: ReasonFailed, Attempts: 3}},
		{"failed at max, on_unknown_urn=dead_letter counts as DLQ on", Facts{Kind: Failed, Attempts: 2}, dlqURN, plain, Decision{Action: ActDeadLetter, Reason: ReasonFailed, Attempts: 3}},
		{"failed at max, DLQ off: drop", Facts{Kind: Failed, Attempts: 2}, off, plain, Decision{Action: ActDrop, Reason: dropExhausted, Attempts: 3}},
		{"failed past max (native count ran ahead): dead-letter", Facts{Kind: Failed, Attempts: 7}, on, plain, Decision{Action: ActDeadLetter, Reason: ReasonFailed, Attempts: 8}},
		{"max_attempts 1: no retry at all", Facts{Kind: Failed}, Policy{MaxAttempts: 1, DeadLetter: true}, plain, Decision{Action: ActDeadLetter, Reason: ReasonFailed, Attempts: 1}},
		{"failed with tiers: first tier", Facts{Kind: Failed}, tiered, plain, Decision{Action: ActRetry, Attempts: 1, Delay: time.Second}},
		{"failed with tiers: second tier", Facts{Kind: Failed, Attempts: 1}, Policy{MaxAttempts: 5, RetryTiers: tiers}, plain, Decision{Action: ActRetry, Attempts: 2, Delay: 5 * time.Second}},
		{"failed with tiers: last tier repeats", Facts{Kind: Failed, Attempts: 3}, Policy{MaxAttempts: 9, RetryTiers: tiers}, plain, Decision{Action: ActRetry, Attempts: 4, Delay: 5 * time.Second}},
		{"tier clamped to the broker's max delay", Facts{Kind: Failed}, Policy{MaxAttempts: 3, RetryTiers: []time.Duration{time.Hour}}, sqs, Decision{Action: ActRetry, Attempts: 1, Delay: 15 * time.Minute}},

		// a counter at its maximum saturates: the delivery settles now, it never loops
		{"failed at MaxInt attempts, DLQ on: dead-letter, counter saturated", Facts{Kind: Failed, Attempts: math.MaxInt}, on, plain, Decision{Action: ActDeadLetter, Reason: ReasonFailed, Attempts: math.MaxInt}},
		{"failed at MaxInt attempts, DLQ off: drop", Facts{Kind: Failed, Attempts: math.MaxInt}, off, plain, Decision{Action: ActDrop, Reason: dropExhausted, Attempts: math.MaxInt}},
		{"unknown URN at MaxInt attempts, fail: dead-letter unknown_urn", Facts{Kind: UnknownURN, Attempts: math.MaxInt}, on, plain, Decision{Action: ActDeadLetter, Reason: ReasonUnknownURN, Attempts: math.MaxInt}},
		{"poison at MaxInt attempts, DLQ off: drop", Facts{Kind: Poison, Attempts: math.MaxInt}, off, plain, Decision{Action: ActDrop, Reason: dropExhausted, Attempts: math.MaxInt}},

		// a negative attempts (docs/settlement.md): read as written and counted on from, as
		// the Python SDK does; what the runtime writes or records is never below 0
		{"failed at attempts -1: retry with attempts 0 (one more delivery, as Python)", Facts{Kind: Failed, Attempts: -1}, on, plain, Decision{Action: ActRetry, Attempts: 0}},
		{"failed at attempts -1, max_attempts 1: retried once, as Python", Facts{Kind: Failed, Attempts: -1}, Policy{MaxAttempts: 1, DeadLetter: true}, plain, Decision{Action: ActRetry, Attempts: 0}},
		{"failed at attempts -1 with tiers: the first tier, as every first retry", Facts{Kind: Failed, Attempts: -1}, tiered, plain, Decision{Action: ActRetry, Attempts: 0, Delay: time.Second}},
		{"failed at attempts -5: retry with attempts 0, never a negative write", Facts{Kind: Failed, Attempts: -5}, on, plain, Decision{Action: ActRetry, Attempts: 0}},
		{"failed at the smallest int: retry with attempts 0", Facts{Kind: Failed, Attempts: math.MinInt}, on, plain, Decision{Action: ActRetry, Attempts: 0}},
		{"no retry at attempts -1, DLQ on: dead-letter recording 0", Facts{Kind: Unretryable, Attempts: -1}, on, plain, Decision{Action: ActDeadLetter, Reason: ReasonFailed, Attempts: 0}},
		{"unknown at attempts -1, dead_letter: the block records 0, not -1", Facts{Kind: UnknownURN, Attempts: -1}, dlqURN, plain, Decision{Action: ActDeadLetter, Reason: ReasonUnknownURN, Attempts: 0, Untried: true}},
		{"unknown at attempts -1, fail: retried with attempts 0", Facts{Kind: UnknownURN, Attempts: -1}, on, plain, Decision{Action: ActRetry, Attempts: 0}},
		{"unknown at attempts -1, release: re-published unchanged, count as read", Facts{Kind: UnknownURN, Attempts: -1}, rel, plain, Decision{Action: ActRelease, Attempts: -1}},
		{"requeued at attempts -1: unchanged, count as read", Facts{Kind: Requeued, Attempts: -1}, on, plain, Decision{Action: ActRelease, Attempts: -1}},
		{"poison at attempts -1, DLQ on: the block records 0", Facts{Kind: Poison, Attempts: -1}, on, plain, Decision{Action: ActPoisonDeadLetter, Reason: ReasonPoison, Attempts: 0}},
		{"poison at attempts -1, DLQ off: bounded retry from 0", Facts{Kind: Poison, Attempts: -1}, off, plain, Decision{Action: ActPoisonRetry, Attempts: 0}},
		{"gate rejected at attempts -1, DLQ on: raw, counted 0", Facts{Kind: SchemaRejected, Attempts: -1}, on, kafka, Decision{Action: ActRawDeadLetter, Attempts: 0}},

		// the handler said do not retry
		{"no retry, DLQ on: dead-letter failed at once", Facts{Kind: Unretryable}, on, plain, Decision{Action: ActDeadLetter, Reason: ReasonFailed, Attempts: 1}},
		{"no retry on a later attempt: counted", Facts{Kind: Unretryable, Attempts: 1}, Policy{MaxAttempts: 9, DeadLetter: true}, plain, Decision{Action: ActDeadLetter, Reason: ReasonFailed, Attempts: 2}},
		{"no retry, DLQ off: drop", Facts{Kind: Unretryable}, off, plain, Decision{Action: ActDrop, Reason: dropNoRetry, Attempts: 1}},

		// the handler asked to be given back later
		{"requeued: re-published unchanged, not counted", Facts{Kind: Requeued, Attempts: 1, After: time.Second}, on, plain, Decision{Action: ActRelease, Attempts: 1, Delay: time.Second}},
		{"requeued: delay clamped to the broker's max", Facts{Kind: Requeued, After: time.Hour}, on, sqs, Decision{Action: ActRelease, Delay: 15 * time.Minute}},

		// unknown URN
		{"unknown, delete: drop", Facts{Kind: UnknownURN}, del, plain, Decision{Action: ActDrop, Reason: dropDeleted}},
		{"unknown, release: re-publish unchanged", Facts{Kind: UnknownURN, Attempts: 1}, rel, plain, Decision{Action: ActRelease, Attempts: 1}},
		{"unknown, dead_letter: dead-letter unknown_urn, no retry, untried", Facts{Kind: UnknownURN}, dlqURN, plain, Decision{Action: ActDeadLetter, Reason: ReasonUnknownURN, Attempts: 0, Untried: true}},
		{"unknown, fail: retried like a failure", Facts{Kind: UnknownURN}, on, plain, Decision{Action: ActRetry, Attempts: 1}},
		{"unknown, fail, exhausted, DLQ on: unknown_urn", Facts{Kind: UnknownURN, Attempts: 2}, on, plain, Decision{Action: ActDeadLetter, Reason: ReasonUnknownURN, Attempts: 3}},
		{"unknown, fail, exhausted, DLQ off: drop", Facts{Kind: UnknownURN, Attempts: 2}, off, plain, Decision{Action: ActDrop, Reason: dropExhausted, Attempts: 3}},

		// poison
		{"poison, delete: drop", Facts{Kind: Poison}, del, plain, Decision{Action: ActDrop, Reason: dropDeleted}},
		{"poison, delete with DLQ on: still drop", Facts{Kind: Poison}, delOn, plain, Decision{Action: ActDrop, Reason: dropDeleted}},
		{"poison, DLQ on: dead-letter at once", Facts{Kind: Poison, Attempts: 1}, on, plain, Decision{Action: ActPoisonDeadLetter, Reason: ReasonPoison, Attempts: 1}},
		{"poison, on_unknown_urn=dead_letter: dead-letter at once", Facts{Kind: Poison}, dlqURN, plain, Decision{Action: ActPoisonDeadLetter, Reason: ReasonPoison}},
		{"poison, DLQ off: bounded retry", Facts{Kind: Poison}, off, plain, Decision{Action: ActPoisonRetry, Attempts: 1}},
		{"poison, DLQ off, second: bounded retry", Facts{Kind: Poison, Attempts: 1}, off, plain, Decision{Action: ActPoisonRetry, Attempts: 2}},
		{"poison, DLQ off, at max: drop", Facts{Kind: Poison, Attempts: 2}, off, plain, Decision{Action: ActDrop, Reason: dropExhausted, Attempts: 3}},
		{"poison, DLQ off, release strategy: bounded fail path, not release", Facts{Kind: Poison}, rel, plain, Decision{Action: ActPoisonRetry, Attempts: 1}},
		{"poison, DLQ off, tiers: bounded retry on the tier", Facts{Kind: Poison}, tiered, plain, Decision{Action: ActPoisonRetry, Attempts: 1, Delay: time.Second}},
		{"redis: poison, DLQ off: dead-letter anyway", Facts{Kind: Poison}, off, redis, Decision{Action: ActPoisonDeadLetter, Reason: ReasonPoison}},
		{"redis: poison, delete: dead-letter unconditionally", Facts{Kind: Poison}, del, redis, Decision{Action: ActPoisonDeadLetter, Reason: ReasonPoison}},
		{"sqs/sb: poison, DLQ off: hand to the broker", Facts{Kind: Poison, Attempts: 4}, off, sqs, Decision{Action: ActHandOff}},
		{"sqs/sb: poison, DLQ on: dead-letter", Facts{Kind: Poison}, on, sqs, Decision{Action: ActPoisonDeadLetter, Reason: ReasonPoison}},
		{"sqs/sb: poison, delete: drop", Facts{Kind: Poison}, del, sqs, Decision{Action: ActDrop, Reason: dropDeleted}},
		{"kafka: poison, DLQ off, no tiers: commit, drop, log", Facts{Kind: Poison}, off, kafka, Decision{Action: ActDrop, Reason: dropNoTiers}},
		{"kafka: poison, DLQ off, tiers: bounded retry through the tiers", Facts{Kind: Poison}, tiered, kafka, Decision{Action: ActPoisonRetry, Attempts: 1, Delay: time.Second}},
		{"kafka: poison, DLQ off, tiers, at max: drop", Facts{Kind: Poison, Attempts: 2}, tiered, kafka, Decision{Action: ActDrop, Reason: dropExhausted, Attempts: 3}},
		{"kafka: poison, DLQ on: dead-letter", Facts{Kind: Poison}, on, kafka, Decision{Action: ActPoisonDeadLetter, Reason: ReasonPoison}},

		// schema-version gate
		{"gate, delete: drop before the gate", Facts{Kind: SchemaRejected}, delOn, kafka, Decision{Action: ActDrop, Reason: dropDeleted}},
		{"gate, DLQ on: raw body to the DLQ", Facts{Kind: SchemaRejected}, on, kafka, Decision{Action: ActRawDeadLetter}},
		{"gate, on_unknown_urn=dead_letter: raw body to the DLQ", Facts{Kind: SchemaRejected}, dlqURN, sqs, Decision{Action: ActRawDeadLetter}},
		{"gate, DLQ off, kafka/artemis: drop with a warning", Facts{Kind: SchemaRejected}, off, kafka, Decision{Action: ActDrop, Reason: dropRejected}},
		{"gate, DLQ off, sqs/sb: hand to the broker", Facts{Kind: SchemaRejected}, off, sqs, Decision{Action: ActHandOff}},
		{"gate, never retried even with tiers", Facts{Kind: SchemaRejected, Attempts: 0}, tiered, kafka, Decision{Action: ActDrop, Reason: dropRejected}},

		{"unknown kind: give it back", Facts{Kind: Kind(99)}, on, plain, Decision{Action: ActRewind}},

		// the handler outlived the shutdown grace: given back, whatever it returns later
		{"abandoned at the shutdown grace: rewind", Facts{Kind: Handled, Abandoned: true}, on, plain, Decision{Action: ActRewind}},
		{"abandoned, even a failure at max: rewind", Facts{Kind: Failed, Attempts: 2, Abandoned: true}, on, plain, Decision{Action: ActRewind}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			route := Decide(tc.f, tc.p, tc.c)
			if got := route.First(); got != tc.want {
				t.Errorf("Decide(%+v) =\n  %+v\nwant\n  %+v", tc.f, got, tc.want)
			}
		})
	}
}

func TestGateSchemaVersion(t *testing.T) {
	for _, tc := range []struct {
		v        any
		intOK    bool
		ok       bool
		shownWas string
	}{
		{nil, false, true, ""},
		{"", false, true, ""},
		{" \t\n\v\f\r", false, true, ""},
		{"1", false, true, ""},
		{"2", false, false, "2"},
		{"x", false, false, "x"},
		{"01", false, false, "01"},
		{" 1", false, false, " 1"},
		{"1 ", false, false, "1 "},
		{"\u00a0", false, false, "\u00a0"}, // not ASCII white space
		{int64(1), false, false, "1"},
		{int64(1), true, true, ""},
		{int32(1), true, true, ""},
		{int64(2), true, false, "2"},
		{1.0, true, false, "1.0"},
		{1.5, true, false, "1.5"},
		{true, true, false, "true"},
		{[]byte("1"), false, true, ""},
	} {
		ok, shown := GateSchemaVersion(tc.v, tc.intOK)
		if ok != tc.ok || (!ok && shown != tc.shownWas) {
			t.Errorf("GateSchemaVersion(%#v, %v) = %v, %q; want %v, %q", tc.v, tc.intOK, ok, shown, tc.ok, tc.shownWas)
		}
	}
}

// The settlement rules are one pure function: what happens to a delivery is a
// function of what became of it, the options and the broker's capabilities.
func ExampleDecide() {
	p := Policy{MaxAttempts: 3, DeadLetter: true}
	for attempts := range 3 {
		r := Decide(Facts{Kind: Failed, Attempts: attempts}, p, transport.Capabilities{})
		d := r.First()
		fmt.Println(attempts, d.Action, d.Attempts)
	}
	// Output:
	// 0 retry 1
	// 1 retry 2
	// 2 dead_letter 3
}
