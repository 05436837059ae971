package settle

import "fmt"

// Setback is what can stop a step of a [Route] before its settlement is made. The
// route names the step that follows each one; a settlement that fails in any other way
// (a write the broker did not confirm, the broker gone) is rewound, so the broker
// delivers it again and nothing is lost.
type Setback uint8

const (
	// Unbuildable: the step's write cannot be built (an edit the received body refuses).
	Unbuildable Setback = 1 << iota
	// TooLarge: the broker refused the step's write for its size
	// (transport.ErrTooLarge).
	TooLarge
)

// String returns the setback's name.
func (s Setback) String() string {
	switch s {
	case 0:
		return "none"
	case Unbuildable:
		return "unbuildable"
	case TooLarge:
		return "too_large"
	case Unbuildable | TooLarge:
		return "unbuildable|too_large"
	default:
		return fmt.Sprintf("setback(%d)", uint8(s))
	}
}

// Step is one step of a [Route]: a decision, and the setbacks of an earlier step that
// lead to it.
type Step struct {
	Decision
	// After is the setbacks that lead here from an earlier step; zero for the first.
	After Setback
}

// maxSteps is the most steps a route has: the decision, the received bytes on the DLQ,
// and a drop for each setback.
const maxSteps = 4

// Route is the whole of what becomes of a delivery: its decision (the first step),
// then the steps that take the place of a step whose write cannot be built or is
// refused for its size. Such a write fails the same way on every redelivery, so it is
// never rewound (a rewind would bring the delivery back for ever): the received bytes
// go to the DLQ (the broker delivered them, so they fit, and they need no edit), or,
// with the DLQ off or when even those are refused, the delivery is dropped and the drop
// logged. Every fallback keeps the decision's attempts (0 for a release of a body that
// said a negative count: what the runtime writes or records is never below 0).
//
// The runtime carries a route out with [Route.Step] and [Route.Next]. A route is a small
// value (the decision and whether the DLQ is on): the steps after the first follow from
// those two, and are spelled out only when a setback asks for them.
type Route struct {
	first Decision
	dlq   bool // dead-lettering is on: a stopped write falls back to the received bytes
}

// Len is the number of steps.
func (r *Route) Len() int {
	_, n := r.steps()
	return n
}

// Step returns step i; step 0 is the decision.
func (r *Route) Step(i int) Decision {
	if i == 0 {
		return r.first
	}
	steps, _ := r.steps()
	return steps[i].Decision
}

// First returns the decision: the step taken unless a setback stops it.
func (r *Route) First() Decision { return r.first }

// Next returns the step that follows step i when s stopped it, and false when the
// route has none: the delivery is then rewound.
func (r *Route) Next(i int, s Setback) (int, bool) {
	steps, n := r.steps()
	for j := i + 1; j < n; j++ {
		if steps[j].After&s != 0 {
			return j, true
		}
	}
	return 0, false
}

// steps spells the route out. A step that writes is followed, for either setback, by
// the received bytes on the DLQ when the DLQ is on (unless the step was that already),
// then by a drop whose reason names the setback. A step that writes nothing has nothing
// a setback can stop.
func (r *Route) steps() (steps [maxSteps]Step, count int) {
	add := func(s Step) {
		steps[count] = s
		count++
	}
	d := r.first
	add(Step{Decision: d})
	if !d.Action.writes() {
		return steps, count
	}
	n := recorded(d.Attempts) // a release carries a negative count as read; a fallback records 0
	if r.dlq && d.Action != ActRawDeadLetter {
		add(Step{Decision: Decision{Action: ActRawDeadLetter, Attempts: n}, After: Unbuildable | TooLarge})
	}
	add(Step{Decision: Decision{Action: ActDrop, Reason: dropUnbuildable, Attempts: n}, After: Unbuildable})
	add(Step{Decision: Decision{Action: ActDrop, Reason: dropTooLarge, Attempts: n}, After: TooLarge})
	return steps, count
}

// writes reports whether a settlement of a makes a write, which a setback can stop.
func (a Action) writes() bool {
	switch a {
	case ActRetry, ActRelease, ActDeadLetter, ActPoisonDeadLetter, ActPoisonRetry, ActRawDeadLetter:
		return true
	default:
		return false
	}
}
