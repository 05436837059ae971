package settle

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// route is a route's steps spelled out, for the tables.
func route(steps ...Step) []Step { return steps }

// stepsOf spells r out.
func stepsOf(r Route) []Step {
	steps, n := r.steps()
	return steps[:n]
}

// TestRoute is the whole route of a delivery as a table: the decision (TestDecide has a
// row for each) and the steps that take its place when its write cannot be built or the
// broker refuses it for its size (docs/settlement.md, "Confirmed settle writes").
func TestRoute(t *testing.T) {
	var (
		plain  = transport.Capabilities{}
		redis  = transport.Capabilities{PoisonAlwaysDeadLetter: true}
		sqs    = transport.Capabilities{HandOff: true, SchemaGate: true, Delay: true, MaxDelay: 15 * time.Minute}
		kafka  = transport.Capabilities{PoisonNeedsRetryTiers: true, SchemaGate: true, Delay: true}
		off    = Policy{MaxAttempts: 3}
		on     = Policy{MaxAttempts: 3, DeadLetter: true}
		dlqURN = Policy{MaxAttempts: 3, OnUnknownURN: UnknownDeadLetter}
		rel    = Policy{MaxAttempts: 3, OnUnknownURN: UnknownRelease}
	)
	// The fallbacks of a step that writes, keeping its attempts n.
	raw := func(n int) Step {
		return Step{Decision: Decision{Action: ActRawDeadLetter, Attempts: n}, After: Unbuildable | TooLarge}
	}
	unbuilt := func(n int) Step {
		return Step{Decision: Decision{Action: ActDrop, Reason: dropUnbuildable, Attempts: n}, After: Unbuildable}
	}
	tooLarge := func(n int) Step {
		return Step{Decision: Decision{Action: ActDrop, Reason: dropTooLarge, Attempts: n}, After: TooLarge}
	}
	first := func(d Decision) Step { return Step{Decision: d} }
	for _, tc := range []struct {
		name string
		f    Facts
		p    Policy
		c    transport.Capabilities
		want []Step
	}{
		// nothing written: nothing a setback can stop
		{"handled: ack, nothing else", Facts{Kind: Handled}, on, plain, route(first(Decision{Action: ActAck}))},
		{"exhausted with DLQ off: drop, nothing else", Facts{Kind: Failed, Attempts: 2}, off, plain, route(first(Decision{Action: ActDrop, Reason: dropExhausted, Attempts: 3}))},
		{"sqs/sb poison: hand-off, nothing else", Facts{Kind: Poison}, off, sqs, route(first(Decision{Action: ActHandOff}))},
		{"abandoned: rewind, nothing else", Facts{Kind: Failed, Abandoned: true}, on, plain, route(first(Decision{Action: ActRewind}))},

		// a retry
		{"retry, DLQ on: then the received bytes to the DLQ, then a drop", Facts{Kind: Failed}, on, plain,
			route(first(Decision{Action: ActRetry, Attempts: 1}), raw(1), unbuilt(1), tooLarge(1))},
		{"retry, DLQ off: then a drop naming the setback", Facts{Kind: Failed, Attempts: 1}, off, plain,
			route(first(Decision{Action: ActRetry, Attempts: 2}), unbuilt(2), tooLarge(2))},
		{"unknown URN retried (fail), DLQ on: the same fallbacks", Facts{Kind: UnknownURN}, Policy{MaxAttempts: 3, DeadLetter: true}, plain,
			route(first(Decision{Action: ActRetry, Attempts: 1}), raw(1), unbuilt(1), tooLarge(1))},

		// a dead letter
		{"dead letter: then the received bytes, then a drop", Facts{Kind: Failed, Attempts: 2}, on, plain,
			route(first(Decision{Action: ActDeadLetter, Reason: ReasonFailed, Attempts: 3}), raw(3), unbuilt(3), tooLarge(3))},
		{"unknown URN dead-lettered untried: then the received bytes, then a drop", Facts{Kind: UnknownURN, Attempts: 1}, dlqURN, plain,
			route(first(Decision{Action: ActDeadLetter, Reason: ReasonUnknownURN, Attempts: 1, Untried: true}), raw(1), unbuilt(1), tooLarge(1))},
		{"poison dead letter: then the received bytes, then a drop", Facts{Kind: Poison, Attempts: 1}, on, plain,
			route(first(Decision{Action: ActPoisonDeadLetter, Reason: ReasonPoison, Attempts: 1}), raw(1), unbuilt(1), tooLarge(1))},
		{"redis poison with the DLQ off: no raw fallback, a drop", Facts{Kind: Poison}, off, redis,
			route(first(Decision{Action: ActPoisonDeadLetter, Reason: ReasonPoison}), unbuilt(0), tooLarge(0))},

		// the received bytes already: never written twice
		{"gate rejection to the DLQ: then a drop, not the same write again", Facts{Kind: SchemaRejected, Attempts: 2}, on, kafka,
			route(first(Decision{Action: ActRawDeadLetter, Attempts: 2}), unbuilt(2), tooLarge(2))},

		// a re-publish unchanged
		{"requeued, DLQ on: then the received bytes, then a drop", Facts{Kind: Requeued, Attempts: 1, After: time.Second}, on, plain,
			route(first(Decision{Action: ActRelease, Attempts: 1, Delay: time.Second}), raw(1), unbuilt(1), tooLarge(1))},
		{"unknown URN released, DLQ off: then a drop", Facts{Kind: UnknownURN}, rel, plain,
			route(first(Decision{Action: ActRelease}), unbuilt(0), tooLarge(0))},
		{"poison retry, DLQ off: then a drop", Facts{Kind: Poison, Attempts: 1}, off, plain,
			route(first(Decision{Action: ActPoisonRetry, Attempts: 2}), unbuilt(2), tooLarge(2))},
		{"requeued at attempts -1, DLQ on: the release keeps -1, the fallbacks record 0", Facts{Kind: Requeued, Attempts: -1}, on, plain,
			route(first(Decision{Action: ActRelease, Attempts: -1}), raw(0), unbuilt(0), tooLarge(0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Decide(tc.f, tc.p, tc.c)
			if got := stepsOf(r); !slices.Equal(got, tc.want) {
				t.Errorf("Decide(%+v) =\n  %s\nwant\n  %s", tc.f, show(got), show(tc.want))
			}
			if r.Len() != len(tc.want) {
				t.Errorf("Len() = %d, want %d", r.Len(), len(tc.want))
			}
			for i, s := range tc.want {
				if got := r.Step(i); got != s.Decision {
					t.Errorf("Step(%d) = %+v, want %+v", i, got, s.Decision)
				}
			}
		})
	}
}

// TestRouteNext walks routes as the runtime does: each row gives the setbacks that stop
// the steps taken, in turn, and the actions taken; "rewind" when the route has no step
// left for a setback (the delivery is given back, as for any failed settlement).
func TestRouteNext(t *testing.T) {
	var (
		on    = Policy{MaxAttempts: 3, DeadLetter: true}
		off   = Policy{MaxAttempts: 3}
		plain = transport.Capabilities{}
	)
	for _, tc := range []struct {
		name     string
		f        Facts
		p        Policy
		setbacks []Setback
		want     string
	}{
		{"nothing stops it", Facts{Kind: Failed}, on, nil, "retry"},
		{"retry too large, DLQ on: the received bytes", Facts{Kind: Failed}, on, []Setback{TooLarge}, "retry raw_dead_letter"},
		{"retry too large, received bytes too large: drop", Facts{Kind: Failed}, on, []Setback{TooLarge, TooLarge}, "retry raw_dead_letter drop(" + dropTooLarge + ")"},
		{"retry cannot be built, DLQ on: the received bytes", Facts{Kind: Failed}, on, []Setback{Unbuildable}, "retry raw_dead_letter"},
		{"retry cannot be built, received bytes too large: drop", Facts{Kind: Failed}, on, []Setback{Unbuildable, TooLarge}, "retry raw_dead_letter drop(" + dropTooLarge + ")"},
		{"retry cannot be built, DLQ off: drop", Facts{Kind: Failed}, off, []Setback{Unbuildable}, "retry drop(" + dropUnbuildable + ")"},
		{"retry too large, DLQ off: drop", Facts{Kind: Failed}, off, []Setback{TooLarge}, "retry drop(" + dropTooLarge + ")"},
		{"dead letter cannot be built: the received bytes", Facts{Kind: Failed, Attempts: 2}, on, []Setback{Unbuildable}, "dead_letter raw_dead_letter"},
		{"gate rejection too large: drop at once", Facts{Kind: SchemaRejected}, on, []Setback{TooLarge}, "raw_dead_letter drop(" + dropTooLarge + ")"},
		{"a drop stopped: rewind", Facts{Kind: Failed}, off, []Setback{TooLarge, TooLarge}, "retry drop(" + dropTooLarge + ") rewind"},
		{"an ack stopped: rewind", Facts{Kind: Handled}, on, []Setback{TooLarge}, "ack rewind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Decide(tc.f, tc.p, plain)
			i := 0
			taken := []string{name(r.Step(i))}
			for _, s := range tc.setbacks {
				next, ok := r.Next(i, s)
				if !ok {
					taken = append(taken, "rewind")
					break
				}
				i = next
				taken = append(taken, name(r.Step(i)))
			}
			if got := strings.Join(taken, " "); got != tc.want {
				t.Errorf("taken %q, want %q", got, tc.want)
			}
		})
	}
}

func name(d Decision) string {
	if d.Action == ActDrop {
		return "drop(" + d.Reason + ")"
	}
	return d.Action.String()
}

func show(steps []Step) string {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "[%s %+v] ", s.After, s.Decision)
	}
	return b.String()
}
