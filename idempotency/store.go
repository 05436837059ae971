package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Store remembers the message ids whose handler succeeded: the seen-set every SDK of
// the family shares. Its methods are safe for concurrent use.
type Store interface {
	// Seen reports whether id is remembered. An id another worker has only claimed is
	// not remembered.
	Seen(ctx context.Context, id string) (bool, error)
	// Remember records id as processed, replacing a claim on it. The store may expire
	// it after a time to live of its own.
	Remember(ctx context.Context, id string) error
	// Forget drops id, remembered or claimed, so its next delivery runs. Forgetting an
	// unknown id is not an error.
	Forget(ctx context.Context, id string) error
}

// ClaimStore is a [Store] that can also claim an id for one worker for a while (a
// lease), which claim mode needs. Claim checks whether the id is remembered and takes
// the claim in one atomic step.
type ClaimStore interface {
	Store
	// Claim takes id for the caller for lease, unless it is remembered (Status
	// [Remembered]) or another caller holds an unlapsed claim on it (Status [Held]).
	// On success (Status [Claimed]) Claim.Token identifies the claim for Release. A
	// lapsed claim is taken over.
	Claim(ctx context.Context, id string, lease time.Duration) (Claim, error)
	// Release drops the claim on id identified by token, so a redelivery can run it at
	// once. It leaves the id alone when it is remembered or claimed under another token
	// (the lease lapsed and another worker took it over).
	Release(ctx context.Context, id, token string) error
}

// Status is what [ClaimStore.Claim] found.
type Status int

const (
	// Claimed: the caller holds the claim; it runs the handler, then remembers the id
	// or releases the claim.
	Claimed Status = iota + 1
	// Remembered: the id was processed; the delivery is acknowledged without running.
	Remembered
	// Held: another worker holds an unlapsed claim; the delivery is given back to the
	// broker to come again later.
	Held
)

// String returns the status's name.
func (s Status) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case Remembered:
		return "remembered"
	case Held:
		return "held"
	default:
		return fmt.Sprintf("Status(%d)", int(s))
	}
}

// Claim is the answer of [ClaimStore.Claim].
type Claim struct {
	// Status is what the store found.
	Status Status
	// Token identifies the caller's claim when Status is [Claimed]; pass it to
	// [ClaimStore.Release].
	Token string
	// Remaining is what is left of the holder's lease when Status is [Held]; zero when
	// the store cannot tell.
	Remaining time.Duration
}

// ErrHeld is why a delivery was given back to the broker in claim mode: another worker
// holds the claim on its id. It is the cause inside the [babelqueue.RequeueError] the
// wrapped handler returns.
var ErrHeld = errors.New("idempotency: the message id is claimed by another worker")

// StoreError is a store call that failed; the delivery fails with it (the runtime
// retries it), because skipping or running on a guess could lose or repeat an effect.
type StoreError struct {
	// Op is the store call: "seen", "claim", "remember" or "release".
	Op string
	// ID is the message id.
	ID string
	// Err is the store's error.
	Err error
}

// Error names the call, the id and the store's error.
func (e *StoreError) Error() string {
	return fmt.Sprintf("idempotency: store %s of message %q: %v", e.Op, e.ID, e.Err)
}

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// Layout names the SDK whose key or table layout a shared store uses, so that its
// workers and Go workers dedupe each other's messages. Each store module documents
// what the layouts are for it.
type Layout int

const (
	// LayoutReference is the layout of the public Go reference SDK's stores, which
	// SPEC §8.1 names (the default).
	LayoutReference Layout = iota
	// LayoutPHP is the layout of the PHP SDK's stores.
	LayoutPHP
)

// String returns the layout's name.
func (l Layout) String() string {
	switch l {
	case LayoutReference:
		return "reference"
	case LayoutPHP:
		return "php"
	default:
		return fmt.Sprintf("Layout(%d)", int(l))
	}
}
