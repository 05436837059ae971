package transport

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// Browser is implemented by transports that can read the messages waiting on a queue
// without consuming them: an operator's view of a dead-letter queue, a console that
// pages through it, a dry run. Browsing never acknowledges, deletes or reorders a
// message, but how close it comes to leaving no trace at all depends on the broker
// (see each driver's Browse): RabbitMQ marks the messages it lends as redelivered,
// SQS counts a receive, Kafka and Pulsar read without any side effect.
//
// A browse is a walk from a [Cursor]: each call returns the next page and the cursor
// after it, so a program can hold its place in a queue of any length and page forward
// without keeping a connection or the earlier pages. What a page shows is the queue as
// it was when the page was read: messages consumed or added between two calls may be
// missed or shown twice on brokers whose cursor is a position in a list (Redis,
// RabbitMQ, SQS, Artemis); on logs (Kafka, Pulsar) the cursor is an offset and stays
// exact.
//
// Deliveries returned by Browse cannot be settled: their Handle is nil.
type Browser interface {
	// Browse returns at most limit messages of queue, starting at from (the zero
	// Cursor is the head of the queue), in the order a consumer would receive them
	// where the broker has one. A limit below 1 means 1. A cursor that this transport
	// did not return is an error matching [ErrBadCursor]. A queue that does not
	// exist is empty.
	Browse(ctx context.Context, queue string, from Cursor, limit int) (Page, error)
}

// Cursor is a position in a queue returned by [Browser.Browse]. The zero value is the
// head of the queue. It is opaque and only means something to the kind of transport,
// and the queue, that returned it; it is a string so that it can ride in a URL.
type Cursor string

// OffsetCursor returns the cursor of the message n places from the head of a queue,
// for brokers whose browse position is a place in a list (Redis, RabbitMQ, SQS,
// Artemis, memory). The zero Cursor is the same as OffsetCursor(0).
func OffsetCursor(n int) Cursor {
	if n <= 0 {
		return ""
	}
	return Cursor(strconv.Itoa(n))
}

// Offset reads a cursor made by [OffsetCursor]; any other cursor is a
// [*BadCursorError].
func (c Cursor) Offset() (int, error) {
	if c == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(string(c))
	if err != nil || n < 0 || string(c) != strconv.Itoa(n) {
		return 0, &BadCursorError{Cursor: c, Reason: "want a place in the queue (a whole number)"}
	}
	return n, nil
}

// Page is one step of a browse.
type Page struct {
	// Deliveries are the messages read, in queue order. Their Handle is nil.
	Deliveries []*Delivery
	// Next is where the following page starts.
	Next Cursor
	// End reports that the queue held nothing after these messages when the page was
	// read. A later call from Next may still find messages published since.
	End bool
}

// ErrCannotPeek matches the error of a broker that cannot show a queue's messages
// without consuming them (see [CannotPeekError]).
var ErrCannotPeek = errors.New("transport: this broker cannot read a queue without consuming it")

// ErrBadCursor matches the error of [Browser.Browse] for a cursor it did not return.
var ErrBadCursor = errors.New("transport: not a cursor of this queue")

// CannotPeekError is the typed form of [ErrCannotPeek]: it names the transport and
// says why.
type CannotPeekError struct {
	// Transport names the transport (its Go type, or its scheme).
	Transport string
	// Reason says what the broker lacks; empty when the transport does not
	// implement [Browser].
	Reason string
}

// Error describes what cannot be done.
func (e *CannotPeekError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("transport: %s cannot read a queue without consuming it (it does not implement transport.Browser)", e.Transport)
	}
	return fmt.Sprintf("transport: %s cannot read a queue without consuming it: %s", e.Transport, e.Reason)
}

// Is makes the error match [ErrCannotPeek].
func (e *CannotPeekError) Is(target error) bool { return target == ErrCannotPeek }

// BadCursorError is the typed form of [ErrBadCursor].
type BadCursorError struct {
	// Cursor is the cursor that was refused.
	Cursor Cursor
	// Reason says what is wrong with it.
	Reason string
}

// Error describes the refused cursor.
func (e *BadCursorError) Error() string {
	return fmt.Sprintf("transport: bad browse cursor %q: %s", string(e.Cursor), e.Reason)
}

// Is makes the error match [ErrBadCursor].
func (e *BadCursorError) Is(target error) bool { return target == ErrBadCursor }

// Browse reads one page of queue through tr when it is a [Browser], and otherwise
// returns a [*CannotPeekError].
func Browse(ctx context.Context, tr Transport, queue string, from Cursor, limit int) (Page, error) {
	b, ok := tr.(Browser)
	if !ok {
		return Page{}, &CannotPeekError{Transport: fmt.Sprintf("%T", tr)}
	}
	return b.Browse(ctx, queue, from, limit)
}

// BrowseAll walks the whole of queue through tr, a page of pageSize at a time, and
// calls fn with each message in order until fn returns false, the queue ends or ctx
// ends (its error is returned). A transport that is not a [Browser] gives a
// [*CannotPeekError].
func BrowseAll(ctx context.Context, tr Transport, queue string, pageSize int, fn func(*Delivery) bool) error {
	var from Cursor
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		p, err := Browse(ctx, tr, queue, from, pageSize)
		if err != nil {
			return err
		}
		for _, d := range p.Deliveries {
			if !fn(d) {
				return nil
			}
		}
		if p.End || len(p.Deliveries) == 0 && p.Next == from {
			return nil
		}
		from = p.Next
	}
}
