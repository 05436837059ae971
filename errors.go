package babelqueue

import (
	"errors"
	"fmt"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
)

// ErrClosed is returned by an App used after Close, and matches (errors.Is) the closed
// error of every transport and consumer: it is [transport.ErrClosed].
var ErrClosed = transport.ErrClosed

// ErrRunning is returned by a second concurrent Run.
var ErrRunning = errors.New("babelqueue: already running")

// ErrHandlerTimeout is the failure of a handler that ran past the handler timeout.
var ErrHandlerTimeout = errors.New("babelqueue: handler timed out")

// PanicError is the failure of a handler that panicked.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error describes the panic.
func (e *PanicError) Error() string { return fmt.Sprintf("babelqueue: handler panicked: %v", e.Value) }

// Unwrap returns the value the handler panicked with when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// UnknownURNError is the failure of a valid envelope whose URN has no handler. Its text
// is the one every BabelQueue SDK writes into the dead_letter block.
type UnknownURNError struct {
	// URN is the URN that has no handler.
	URN string
}

// Error names the URN.
func (e *UnknownURNError) Error() string { return "No handler mapped for URN [" + e.URN + "]." }

// NoRetryError is a handler failure that retrying will not cure (data that fails its
// schema, a value that does not decrypt). See [NoRetry].
type NoRetryError struct {
	// Err is the failure; its text and type go into dead_letter.error and .exception.
	Err error
}

// Error returns the failure's text.
func (e *NoRetryError) Error() string { return e.Err.Error() }

// Unwrap returns the failure.
func (e *NoRetryError) Unwrap() error { return e.Err }

// NoRetry marks err as a failure that retrying will not cure: the delivery goes to the
// dead-letter queue at once with reason "failed" and err's text, counted as one more
// attempt, or is dropped and logged with dead-lettering off. The envelope and its
// dead_letter block are the family's, unchanged. NoRetry(nil) is nil.
func NoRetry(err error) error {
	if err == nil {
		return nil
	}
	return &NoRetryError{Err: err}
}

// RequeueError asks for the delivery to come again later. See [Requeue].
type RequeueError struct {
	// After is the least time before it comes again.
	After time.Duration
	// Err says why (may be nil).
	Err error
}

// Error says that the delivery was requeued and why.
func (e *RequeueError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("babelqueue: requeued for %s", e.After)
	}
	return fmt.Sprintf("babelqueue: requeued for %s: %v", e.After, e.Err)
}

// Unwrap returns why.
func (e *RequeueError) Unwrap() error { return e.Err }

// Requeue gives the delivery back to its queue unchanged, not counted as an attempt, to
// come again no sooner than after (where the broker has delays; elsewhere at once,
// behind the messages already waiting). The re-publish is confirmed before the original
// is acknowledged, like every settle write. An idempotency claim held by another worker
// answers this way: the message is neither run nor lost.
func Requeue(after time.Duration, why error) error {
	return &RequeueError{After: max(after, 0), Err: why}
}

// failureTargets are the errors.As targets that read a handler's error. A worker
// keeps one set (it reads one error at a time): targets on the heap, which errors.As
// needs, cost no allocation per failure.
type failureTargets struct {
	requeue *RequeueError
	noRetry *NoRetryError
}

// classify reads a handler's error: a requeue, a failure not to retry, or a failure.
func (f *failureTargets) classify(err error) (settle.Kind, time.Duration, error) {
	defer func() { f.requeue, f.noRetry = nil, nil }() // keep no error alive
	if errors.As(err, &f.requeue) {
		return settle.Requeued, f.requeue.After, err
	}
	if errors.As(err, &f.noRetry) {
		return settle.Unretryable, 0, f.noRetry.Err
	}
	return settle.Failed, 0, err
}
