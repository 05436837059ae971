package dlq

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// Entry is one message of a dead-letter queue, read: the delivery as the broker gave
// it, the envelope when the body is one, and the dead_letter block that says why it is
// there. Read builds it; it never fails, since a dead-letter queue may hold anything.
type Entry struct {
	// Delivery is the message as browsed or received.
	Delivery *transport.Delivery
	// Envelope is the decoded body when it is an envelope (with or without its
	// dead_letter block); nil for a poison body.
	Envelope *envelope.Envelope
	// DeadLetter is the dead_letter block: the envelope's, or the one spliced onto or
	// wrapped around a poison body. Nil when the message carries none (a body the
	// schema-version gate rejected, a message written to the queue by hand).
	DeadLetter *envelope.DeadLetter
	// Poison reports that the body is not an envelope a handler would accept (the
	// block's reason is "poison", or the body does not decode as one).
	Poison bool
	// Wrapped reports that the poison body was not a JSON object and rides wrapped as
	// {"raw": …}: Original holds it unwrapped.
	Wrapped bool
	// Original is the body as it was before it was dead-lettered: without the
	// dead_letter block, unwrapped for a wrapped poison body. Nil when it cannot be
	// told (a wrap whose raw member is not readable).
	Original []byte
}

// Read makes an Entry of a delivery from a dead-letter queue.
func Read(d *transport.Delivery) *Entry {
	e := &Entry{Delivery: d}
	env, err := envelope.Decode(d.Body)
	if err == nil {
		e.Envelope = env
		e.DeadLetter = env.DeadLetter
		e.Original = stripDeadLetter(d.Body)
		e.Poison = env.Accepts() != nil || env.DeadLetter != nil && env.DeadLetter.Reason == envelope.ReasonPoison
		return e
	}
	e.Poison = true
	var obj map[string]json.RawMessage
	if json.Unmarshal(d.Body, &obj) != nil {
		e.Original = d.Body // not even a JSON object: dead-lettered by hand, as it is
		return e
	}
	if raw, ok := obj["dead_letter"]; ok {
		e.DeadLetter = readBlock(raw)
	}
	if raw, ok := obj["raw"]; ok && e.DeadLetter != nil && isWrap(obj) {
		e.Wrapped = true
		e.Original = unwrap(raw, obj["raw_encoding"])
		return e
	}
	if e.DeadLetter != nil {
		e.Original = stripDeadLetter(d.Body)
	} else {
		e.Original = d.Body
	}
	return e
}

// isWrap reports whether obj has the members of a poison wrap and no others.
func isWrap(obj map[string]json.RawMessage) bool {
	for k := range obj {
		switch k {
		case "raw", "raw_encoding", "dead_letter":
		default:
			return false
		}
	}
	return true
}

// unwrap returns the original bytes of a wrap's raw member, or nil when they cannot
// be read.
func unwrap(raw, encoding json.RawMessage) []byte {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil
	}
	var enc string
	if encoding != nil && json.Unmarshal(encoding, &enc) != nil {
		return nil
	}
	switch enc {
	case "":
		return []byte(s)
	case "base64":
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil
		}
		return b
	default:
		return nil
	}
}

// readBlock reads a dead_letter block leniently: members of the wrong type read as
// absent, numbers may be written as floats (as some SDKs do).
func readBlock(raw json.RawMessage) *envelope.DeadLetter {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	dl := &envelope.DeadLetter{}
	str := func(name string) (string, bool) {
		var s string
		if v, ok := m[name]; ok && json.Unmarshal(v, &s) == nil {
			return s, true
		}
		return "", false
	}
	num := func(name string) int64 {
		var f json.Number
		if v, ok := m[name]; ok && json.Unmarshal(v, &f) == nil {
			if n, err := f.Int64(); err == nil {
				return n
			}
			if x, err := f.Float64(); err == nil {
				return int64(x)
			}
		}
		return 0
	}
	dl.Reason, _ = str("reason")
	dl.OriginalQueue, _ = str("original_queue")
	dl.Lang, _ = str("lang")
	if s, ok := str("error"); ok {
		dl.Error = &s
	}
	if s, ok := str("exception"); ok {
		dl.Exception = &s
	}
	dl.FailedAt = num("failed_at")
	dl.Attempts = int(num("attempts"))
	return dl
}

// stripDeadLetter returns body without its top-level dead_letter member. A block that
// the dead-lettering SDK spliced in before the closing brace (the Go runtime's way)
// is cut out exactly, so the result is the received body byte for byte; any other
// placement is removed with [envelope.RemoveDeadLetter]. A body without the member
// comes back as it is.
func stripDeadLetter(body []byte) []byte {
	if out, ok := unsplice(body); ok {
		return out
	}
	out, err := envelope.RemoveDeadLetter(body)
	if err != nil {
		return body
	}
	return out
}

// unsplice undoes the splice of a dead_letter member inserted just before the closing
// brace: `,"dead_letter":X}` (or `"dead_letter":X}` as the only member) where X is
// one JSON value and nothing but white space follows the brace.
func unsplice(body []byte) ([]byte, bool) {
	const member = `"dead_letter":`
	end := bytes.LastIndexByte(body, '}')
	if end < 0 || len(bytes.TrimSpace(body[end+1:])) != 0 {
		return nil, false
	}
	at := bytes.LastIndex(body[:end], []byte(member))
	if at < 1 {
		return nil, false
	}
	val := body[at+len(member) : end]
	if len(val) == 0 || isSpace(val[0]) || isSpace(val[len(val)-1]) || !json.Valid(val) {
		return nil, false
	}
	from := at
	switch {
	case body[at-1] == ',':
		from = at - 1
	case len(bytes.TrimSpace(body[:at])) == 1 && bytes.TrimSpace(body[:at])[0] == '{':
	default:
		return nil, false
	}
	out := make([]byte, 0, len(body)-(end-from))
	out = append(append(out, body[:from]...), body[end:]...)
	if !json.Valid(out) {
		return nil, false
	}
	return out, true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// ID returns meta.id, or "" for a poison body.
func (e *Entry) ID() string {
	if e.Envelope == nil {
		return ""
	}
	return e.Envelope.Meta.ID
}

// URN returns the message URN, or "" for a poison body.
func (e *Entry) URN() string {
	if e.Envelope == nil {
		return ""
	}
	return e.Envelope.Job
}

// TraceID returns trace_id, or "" for a poison body.
func (e *Entry) TraceID() string {
	if e.Envelope == nil {
		return ""
	}
	return e.Envelope.TraceID
}

// Lang returns the producing SDK's language (meta.lang), or "" for a poison body.
func (e *Entry) Lang() string {
	if e.Envelope == nil {
		return ""
	}
	return e.Envelope.Meta.Lang
}

// Reason returns the dead_letter reason (failed, unknown_urn, poison), or "" when the
// message carries no block.
func (e *Entry) Reason() string {
	if e.DeadLetter == nil {
		return ""
	}
	return e.DeadLetter.Reason
}

// Error returns the dead_letter error text, or "".
func (e *Entry) Error() string {
	if e.DeadLetter == nil || e.DeadLetter.Error == nil {
		return ""
	}
	return *e.DeadLetter.Error
}

// OriginalQueue returns the queue the message failed on (dead_letter.original_queue),
// or "".
func (e *Entry) OriginalQueue() string {
	if e.DeadLetter == nil {
		return ""
	}
	return e.DeadLetter.OriginalQueue
}

// FailedAt returns when the message was dead-lettered, or the zero time when the
// block does not say.
func (e *Entry) FailedAt() time.Time {
	if e.DeadLetter == nil || e.DeadLetter.FailedAt <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(e.DeadLetter.FailedAt)
}

// Fingerprint returns the error text with its numbers and identifiers masked
// ([Fingerprint]), so that the same failure of many messages reads the same.
func (e *Entry) Fingerprint() string { return Fingerprint(e.Error()) }

// ErrNotRedrivable matches the reason a message cannot be redriven (see
// [*NotRedrivableError]).
var ErrNotRedrivable = errors.New("dlq: message cannot be redriven")

// NotRedrivableError says why one message stays on the dead-letter queue.
type NotRedrivableError struct {
	// Why is a short phrase: "poison (not asked for)", "no target queue", ….
	Why string
}

// Error returns the reason.
func (e *NotRedrivableError) Error() string { return "dlq: not redriven: " + e.Why }

// Is makes the error match [ErrNotRedrivable].
func (e *NotRedrivableError) Is(target error) bool { return target == ErrNotRedrivable }

// Redriven returns the write that puts the message back to work: on queue to (empty:
// dead_letter.original_queue, else meta.queue), with attempts reset to 0 and the
// dead_letter block removed, every other byte, the key and the headers kept. A poison
// body goes back as its original bytes (unwrapped, unspliced), and only when poison
// is true. With bypass the write carries the replay-bypass header
// (bq-replay-bypass: 1). The error, when there is one, is a [*NotRedrivableError].
func (e *Entry) Redriven(to string, poison, bypass bool) (*transport.Message, error) {
	if to == "" {
		to = e.OriginalQueue()
	}
	if to == "" && e.Envelope != nil {
		to = e.Envelope.Meta.Queue
	}
	if to == "" {
		return nil, &NotRedrivableError{Why: "the message names no queue it failed on; choose a target queue"}
	}
	m := &transport.Message{Queue: to, Key: e.Delivery.Key, Headers: maps.Clone(e.Delivery.Headers)}
	switch {
	case e.Poison && !poison:
		return nil, &NotRedrivableError{Why: "poison (redrive poison only when asked)"}
	case e.Poison:
		if e.Original == nil {
			return nil, &NotRedrivableError{Why: "poison whose original bytes cannot be read back"}
		}
		m.Body = e.Original
	default:
		body := e.Original
		if e.Envelope.Attempts != 0 {
			var err error
			if body, err = envelope.SetAttempts(body, 0); err != nil {
				return nil, &NotRedrivableError{Why: "attempts cannot be reset: " + err.Error()}
			}
		}
		m.Body = body
		m.Projection = transport.ProjectionOf(e.Envelope)
	}
	if bypass {
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[ReplayBypassHeader] = "1"
	}
	return m, nil
}

// ReplayBypassHeader is the out-of-band header a redrive with bypass stamps on each
// message it puts back; the runtime reports such a message as a replay
// (babelqueue.IsReplay). It is the family's header name.
const ReplayBypassHeader = "bq-replay-bypass"

// keep returns the write that puts the delivery back on its own queue unchanged: body,
// key, headers and attempts header as received.
func keep(d *transport.Delivery, env *envelope.Envelope) *transport.Message {
	m := &transport.Message{Queue: d.Queue, Body: d.Body, Key: d.Key, Headers: maps.Clone(d.Headers)}
	if env != nil {
		m.Attempts = env.Attempts
		m.Projection = transport.ProjectionOf(env)
	}
	if d.HasAttemptsHeader {
		m.Attempts = d.AttemptsHeader
	}
	return m
}
