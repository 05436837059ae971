// Package settle is the runtime's settlement rule: one pure decision of what becomes of
// a delivery (docs/settlement.md), plus the helpers the runtime and the broker bindings
// share to read a delivery (the schema-version gate, attempts reconciliation, the
// dead-letter queue name). It is internal: users see its effects, not its types.
package settle

import (
	"fmt"
	"math"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Kind is what became of a delivery before it is settled.
type Kind int

const (
	// Handled: the handler returned nil.
	Handled Kind = iota
	// Failed: the handler returned an error, panicked or ran past its timeout.
	Failed
	// UnknownURN: a valid envelope whose URN has no handler.
	UnknownURN
	// Poison: a body that is not a usable envelope (docs/settlement.md).
	Poison
	// SchemaRejected: the schema-version header was rejected before the body was read
	// (the gate of docs/settlement.md).
	SchemaRejected
	// Unretryable: the handler failed and said the delivery must not be retried
	// (babelqueue.NoRetry): it is dead-lettered at once, or dropped with the DLQ off.
	Unretryable
	// Requeued: the handler asked for the delivery to come again later, unchanged and
	// not counted as an attempt (babelqueue.Requeue).
	Requeued
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case Handled:
		return "handled"
	case Failed:
		return "failed"
	case UnknownURN:
		return "unknown_urn"
	case Poison:
		return "poison"
	case SchemaRejected:
		return "schema_rejected"
	case Unretryable:
		return "unretryable"
	case Requeued:
		return "requeued"
	default:
		return fmt.Sprintf("kind(%d)", int(k))
	}
}

// Action is what the runtime does to settle a delivery.
type Action int

const (
	// ActAck acknowledges the delivery: it is done.
	ActAck Action = iota
	// ActDrop acknowledges the delivery without handling it and logs why.
	ActDrop
	// ActRetry re-publishes the body with attempts set to Decision.Attempts, after
	// Decision.Delay, then acknowledges the original.
	ActRetry
	// ActRelease re-publishes the body unchanged, then acknowledges the original.
	ActRelease
	// ActDeadLetter appends a dead_letter block (Decision.Reason) and writes the body
	// to the DLQ, then acknowledges the original.
	ActDeadLetter
	// ActPoisonDeadLetter writes the poison dead-letter body of docs/settlement.md to the DLQ.
	ActPoisonDeadLetter
	// ActPoisonRetry re-publishes the poison body unchanged with the attempts header
	// set to Decision.Attempts (the bounded fail path).
	ActPoisonRetry
	// ActRawDeadLetter writes the incoming body, byte-identical, to the DLQ.
	ActRawDeadLetter
	// ActHandOff leaves the delivery to the broker's own redrive.
	ActHandOff
	// ActRewind gives the delivery back to the broker to redeliver.
	ActRewind
)

// String returns the action's name.
func (a Action) String() string {
	switch a {
	case ActAck:
		return "ack"
	case ActDrop:
		return "drop"
	case ActRetry:
		return "retry"
	case ActRelease:
		return "release"
	case ActDeadLetter:
		return "dead_letter"
	case ActPoisonDeadLetter:
		return "poison_dead_letter"
	case ActPoisonRetry:
		return "poison_retry"
	case ActRawDeadLetter:
		return "raw_dead_letter"
	case ActHandOff:
		return "handoff"
	case ActRewind:
		return "rewind"
	default:
		return fmt.Sprintf("action(%d)", int(a))
	}
}

// Facts are what the runtime knows of a delivery when it settles it.
type Facts struct {
	// Kind is what became of the delivery.
	Kind Kind
	// Attempts is the delivery's reconciled attempts counter, as read: negative when
	// the body (or Kafka's header) says so ([ReconcileAttempts]).
	Attempts int
	// After is how long a Requeued delivery should wait before it comes again.
	After time.Duration
	// Abandoned reports a delivery whose handler outlived the shutdown grace: it is
	// given back to the broker whatever became of it.
	Abandoned bool
}

// OnUnknown is the on_unknown_urn strategy, numbered as the root package's
// UnknownURNStrategy.
type OnUnknown int

// The on_unknown_urn strategies.
const (
	UnknownFail OnUnknown = iota
	UnknownDelete
	UnknownRelease
	UnknownDeadLetter
)

// Policy is the part of the options that settlement reads.
type Policy struct {
	MaxAttempts  int
	DeadLetter   bool
	OnUnknownURN OnUnknown
	RetryTiers   []time.Duration
}

// DLQOn reports whether dead-lettering is on: dead_letter is true or on_unknown_urn is
// dead_letter.
func (p Policy) DLQOn() bool { return p.DeadLetter || p.OnUnknownURN == UnknownDeadLetter }

// Decision is the outcome of [Decide].
type Decision struct {
	// Action is what to do.
	Action Action
	// Reason is the dead_letter reason for ActDeadLetter and ActPoisonDeadLetter, and
	// a short word for ActDrop.
	Reason string
	// Attempts is the counter written by a retry, or recorded in a dead_letter block:
	// never negative. A release re-publishes the delivery unchanged and carries
	// Facts.Attempts as it was read.
	Attempts int
	// Delay is the retry tier's delay for ActRetry and ActPoisonRetry.
	Delay time.Duration
	// Untried marks an ActDeadLetter made by the on_unknown_urn=dead_letter strategy
	// before any attempt: its dead_letter block records no error, and the body keeps
	// the attempts it was received with (the block is appended, nothing else edited).
	Untried bool
}

// Dead-letter reasons (docs/settlement.md) and drop reasons.
const (
	ReasonFailed     = "failed"
	ReasonUnknownURN = "unknown_urn"
	ReasonPoison     = "poison"

	dropDeleted   = "on_unknown_urn=delete"
	dropExhausted = "max_attempts reached with dead-lettering off"
	dropNoTiers   = "poison without retry tiers or DLQ"
	dropRejected  = "schema version rejected with dead-lettering off"
	dropNoRetry   = "handler said do not retry, dead-lettering off"

	dropUnbuildable = "the settle write could not be built"
	dropTooLarge    = "the settle write is over the broker's size limit"
)

// Decide is the settlement rule (docs/settlement.md), as one pure function of what is
// known of a delivery, the options and the transport's capabilities. It returns the
// whole route: the decision, and what takes its place when its write cannot be built or
// the broker refuses it for its size. The runtime carries out what it returns and
// decides nothing itself; the table-driven tests of this function are the settlement
// specification in executable form.
func Decide(f Facts, p Policy, c transport.Capabilities) Route {
	return Route{first: decide(f, p, c), dlq: p.DLQOn()}
}

// decide is the first step of a delivery's route.
func decide(f Facts, p Policy, c transport.Capabilities) Decision {
	if f.Abandoned {
		return Decision{Action: ActRewind}
	}
	switch f.Kind {
	case Handled:
		return Decision{Action: ActAck}

	case Failed:
		return failPath(f, p, c, ReasonFailed)

	case Unretryable:
		n := next(f.Attempts)
		if p.DLQOn() {
			return Decision{Action: ActDeadLetter, Reason: ReasonFailed, Attempts: n}
		}
		return Decision{Action: ActDrop, Reason: dropNoRetry, Attempts: n}

	case Requeued:
		d := max(f.After, 0)
		if c.MaxDelay > 0 && d > c.MaxDelay {
			d = c.MaxDelay
		}
		return Decision{Action: ActRelease, Attempts: f.Attempts, Delay: d}

	case UnknownURN:
		switch p.OnUnknownURN {
		case UnknownDelete:
			return Decision{Action: ActDrop, Reason: dropDeleted}
		case UnknownRelease:
			return Decision{Action: ActRelease, Attempts: f.Attempts}
		case UnknownDeadLetter:
			return Decision{Action: ActDeadLetter, Reason: ReasonUnknownURN, Attempts: recorded(f.Attempts), Untried: true}
		default:
			return failPath(f, p, c, ReasonUnknownURN)
		}

	case Poison:
		if c.PoisonAlwaysDeadLetter {
			return Decision{Action: ActPoisonDeadLetter, Reason: ReasonPoison, Attempts: recorded(f.Attempts)}
		}
		if p.OnUnknownURN == UnknownDelete {
			return Decision{Action: ActDrop, Reason: dropDeleted}
		}
		if p.DLQOn() {
			return Decision{Action: ActPoisonDeadLetter, Reason: ReasonPoison, Attempts: recorded(f.Attempts)}
		}
		if c.HandOff {
			return Decision{Action: ActHandOff}
		}
		if c.PoisonNeedsRetryTiers && len(p.RetryTiers) == 0 {
			return Decision{Action: ActDrop, Reason: dropNoTiers, Attempts: recorded(f.Attempts)}
		}
		n := next(f.Attempts)
		if n < p.MaxAttempts {
			return Decision{Action: ActPoisonRetry, Attempts: n, Delay: tierDelay(p.RetryTiers, n, c)}
		}
		return Decision{Action: ActDrop, Reason: dropExhausted, Attempts: n}

	case SchemaRejected:
		switch {
		case p.OnUnknownURN == UnknownDelete:
			return Decision{Action: ActDrop, Reason: dropDeleted}
		case p.DLQOn():
			return Decision{Action: ActRawDeadLetter, Attempts: recorded(f.Attempts)}
		case c.HandOff:
			return Decision{Action: ActHandOff}
		default:
			return Decision{Action: ActDrop, Reason: dropRejected}
		}
	}
	return Decision{Action: ActRewind}
}

// next is the counter after one more attempt: attempts+1, as the Python SDK counts, so
// a body that says -1 gets the one more delivery Python gives it. It is never below 0
// (what the runtime writes is a valid count; SPEC §1, and the envelope schema's
// minimum 0): a counter below -1 restarts at 0, so max_attempts still bounds the
// deliveries (at most one more than a body that says 0). It saturates at the largest
// int: a counter at its maximum stays there (at or past any max_attempts) and never
// wraps.
func next(attempts int) int {
	if attempts >= math.MaxInt {
		return math.MaxInt
	}
	return max(attempts, -1) + 1
}

// recorded is the count a dead_letter block records for a delivery settled without a
// new attempt (an immediate dead letter): the delivery's count, never below 0.
func recorded(attempts int) int { return max(attempts, 0) }

func failPath(f Facts, p Policy, c transport.Capabilities, reason string) Decision {
	n := next(f.Attempts)
	if n < p.MaxAttempts {
		return Decision{Action: ActRetry, Attempts: n, Delay: tierDelay(p.RetryTiers, n, c)}
	}
	if p.DLQOn() {
		return Decision{Action: ActDeadLetter, Reason: reason, Attempts: n}
	}
	return Decision{Action: ActDrop, Reason: dropExhausted, Attempts: n}
}

// tierDelay is the delay of the retry that makes attempt n (1-based): the n-th tier,
// or the last tier once the tiers run out. The retry of a body that said -1 (n is 0)
// waits the first tier, as every first retry does.
func tierDelay(tiers []time.Duration, n int, c transport.Capabilities) time.Duration {
	if len(tiers) == 0 {
		return 0
	}
	d := tiers[min(max(n, 1), len(tiers))-1]
	if c.MaxDelay > 0 && d > c.MaxDelay {
		d = c.MaxDelay
	}
	return d
}
