// Package dlqtest builds dead-letter queues for tests: a mixed set of dead-lettered
// messages (failed, unknown URN, poison spliced and wrapped, three producing
// languages, keyed and unkeyed, with and without headers) whose counts and redriven
// bytes are known in advance.
package dlqtest

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// Langs are the producing languages of the seeded envelopes, in turn.
var Langs = []string{"php", "python", "go"}

// The URNs of the seeded envelopes.
const (
	URNOrders   = "urn:babel:orders:created"
	URNPayments = "urn:babel:payments:captured"
	URNGhost    = "urn:babel:ghost:event" // the unknown URN
)

// Item is one seeded dead letter.
type Item struct {
	// Message is the dead-letter write (Queue is the dead-letter queue).
	Message *transport.Message
	// ID is meta.id ("" for poison).
	ID string
	// Reason is the dead_letter reason.
	Reason string
	// Lang is meta.lang ("" for poison).
	Lang string
	// URN is the job ("" for poison).
	URN string
	// Fingerprint is the error's fingerprint.
	Fingerprint string
	// Redriven is the body a redrive must write: the envelope before it was
	// dead-lettered with attempts 0, or the poison's original bytes.
	Redriven []byte
	// Poison reports a poison body; Wrapped one that rides as {"raw": …}.
	Poison, Wrapped bool
	// FailedAt is the dead_letter failed_at.
	FailedAt time.Time
}

// Seed is a seeded dead-letter queue.
type Seed struct {
	Queue, DLQ string
	Items      []Item
}

// Fingerprints of the seeded error texts.
const (
	FPTimeout = "timeout after <n>s calling billing for order <n>"
	FPRefused = "dial tcp <n>.<n>.<n>.<n>:<n>: connection refused (request <uuid>)"
	FPUnknown = "no handler for urn:babel:ghost:event"
)

// Mixed returns n dead letters of work queue queue on dlq: of every ten, five failed
// (two error kinds), three unknown_urn, one poison spliced onto an identity-less
// object and one poison wrapped (a body that is not JSON); producing languages php,
// python and go in turn; a key on every third message (an empty key on every
// seventh), a traceparent header on every other. failed_at is now minus i seconds.
func Mixed(queue, dlq string, n int, now time.Time) Seed {
	s := Seed{Queue: queue, DLQ: dlq}
	for i := range n {
		s.Items = append(s.Items, item(queue, dlq, i, now))
	}
	return s
}

func item(queue, dlq string, i int, now time.Time) Item {
	failedAt := now.Add(-time.Duration(i) * time.Second)
	lang := Langs[i%len(Langs)]
	it := Item{Lang: lang, FailedAt: failedAt}
	var key []byte
	switch {
	case i%7 == 0:
		key = []byte{}
	case i%3 == 0:
		key = []byte(fmt.Sprintf("customer-%d", i%17))
	}
	var headers map[string]string
	if i%2 == 0 {
		headers = map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)}
	}
	dl := envelope.DeadLetter{FailedAt: failedAt.UnixMilli(), OriginalQueue: queue, Attempts: 3, Lang: lang}
	var body []byte
	switch r := i % 10; {
	case r < 8:
		urn := URNOrders
		errText := fmt.Sprintf("timeout after %ds calling billing for order %d", 10+i%5, 1000+i)
		it.Fingerprint = FPTimeout
		dl.Reason = envelope.ReasonFailed
		if r%2 == 1 {
			urn = URNPayments
			errText = fmt.Sprintf("dial tcp 10.0.%d.%d:5432: connection refused (request %08x-1111-4222-8333-%012x)", i%4, i%250, i, i)
			it.Fingerprint = FPRefused
		}
		if r >= 5 {
			urn = URNGhost
			errText = "no handler for " + URNGhost
			it.Fingerprint = FPUnknown
			dl.Reason = envelope.ReasonUnknownURN
		}
		exc := "HandlerError"
		dl.Error, dl.Exception = &errText, &exc
		env, err := envelope.Make(urn, map[string]any{"order_id": 1000 + i, "note": "ümlaut & <tag>", "big": json.Number("12345678901234567890")},
			envelope.WithQueue(queue), envelope.WithCreatedAt(failedAt.Add(-time.Minute)))
		if err != nil {
			panic(err)
		}
		env.Meta.Lang = lang
		orig, err := env.Encode()
		if err != nil {
			panic(err)
		}
		it.Redriven = orig
		failed, err := envelope.SetAttempts(orig, 3)
		if err != nil {
			panic(err)
		}
		if body, err = envelope.AppendDeadLetter(failed, dl); err != nil {
			panic(err)
		}
		it.ID, it.URN, it.Reason = env.Meta.ID, urn, dl.Reason
		it.Message = &transport.Message{Queue: dlq, Body: body, Key: key, Headers: headers, Attempts: 3, Projection: transport.Projection{
			URN: urn, TraceID: env.TraceID, MessageID: env.Meta.ID, Lang: lang, SchemaVersion: 1, CreatedAt: env.Meta.CreatedAt,
		}}
		return it
	case r == 8:
		orig := []byte(fmt.Sprintf(`{"event":"legacy","n":%d}`, i))
		body = envelope.PoisonBody(orig, envelope.PoisonDeadLetter(&envelope.PoisonError{Reason: envelope.ReasonIdentityLess, Detail: "no job"}, queue, 1, failedAt.UnixMilli()))
		it.Redriven = orig
	default:
		orig := []byte(fmt.Sprintf("not json at all #%d", i))
		body = envelope.PoisonBody(orig, envelope.PoisonDeadLetter(&envelope.PoisonError{Reason: envelope.ReasonInvalidJSON, Detail: "invalid character 'o' in literal null"}, queue, 1, failedAt.UnixMilli()))
		it.Redriven = orig
		it.Wrapped = true
	}
	it.Poison, it.Reason, it.Lang = true, envelope.ReasonPoison, ""
	it.Fingerprint = ""
	if r := i % 10; r == 8 {
		it.Fingerprint = "envelope: poison body: identity_less: no job"
	} else {
		it.Fingerprint = "envelope: poison body: invalid_json: invalid character 'o' in literal null"
	}
	it.Message = &transport.Message{Queue: dlq, Body: body, Key: key, Headers: headers, Attempts: 1}
	return it
}

// Count returns how many items pred holds for.
func (s Seed) Count(pred func(Item) bool) int {
	n := 0
	for _, it := range s.Items {
		if pred(it) {
			n++
		}
	}
	return n
}

// Messages returns the dead-letter writes, in order.
func (s Seed) Messages() []*transport.Message {
	out := make([]*transport.Message, len(s.Items))
	for i := range s.Items {
		out[i] = s.Items[i].Message
	}
	return out
}
