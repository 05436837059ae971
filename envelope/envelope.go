// Package envelope is the BabelQueue wire codec: the canonical schema_version 1
// envelope shared by every BabelQueue SDK and broker binding.
//
// It builds new envelopes ([Make], [Envelope.Encode]), decodes received bodies
// ([Decode]) with a single-pass scanner that tells a usable envelope from a
// poison body, applies the consumer acceptance rule ([Envelope.Accepts]) and
// edits received bodies at byte level ([SetAttempts], [AppendDeadLetter],
// [PoisonBody]; from a decoded envelope without a second scan,
// [Envelope.RetryBody] and [Envelope.DeadLetterBody]) so that every byte the
// runtime does not own stays exactly as received.
//
// The package uses the standard library only.
package envelope

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

const (
	// SchemaVersion is the envelope schema version this package reads and writes.
	SchemaVersion = 1
	// Lang is the meta.lang (and dead_letter.lang) value written by this SDK.
	Lang = "go"
	// MaxDepth is the deepest JSON nesting a body may have; deeper is poison.
	MaxDepth = 10000
	// DefaultQueue is the meta.queue [Make] writes when no queue is given.
	DefaultQueue = "default"
)

// Meta is the producer-set metadata block of an envelope.
type Meta struct {
	ID            string `json:"id"`
	Queue         string `json:"queue"`
	Lang          string `json:"lang"`
	SchemaVersion int    `json:"schema_version"`
	CreatedAt     int64  `json:"created_at"` // Unix ms
}

// Envelope is a decoded or freshly made message.
//
// A decoded Envelope refers to the body passed to [Decode] (Data and Raw are
// sub-slices of it): the caller must not modify that body afterwards.
type Envelope struct {
	// Job is the message URN: the "job" member, or the "urn" alias on input.
	Job string
	// TraceID is the correlation id carried unchanged across hops.
	TraceID string
	// Data is the business payload as raw JSON; numbers are kept as written.
	Data json.RawMessage
	// Meta is the metadata block.
	Meta Meta
	// Attempts is the retry counter.
	Attempts int
	// DeadLetter is non-nil only when the body carries a dead_letter object.
	DeadLetter *DeadLetter

	raw         []byte
	hasMeta     bool
	dataIsObj   bool
	hasAttempts bool
	spans       editSpans
}

// Raw returns the exact bytes the envelope was decoded from (nil for an
// envelope made with [Make]).
func (e *Envelope) Raw() []byte { return e.raw }

// Bind unmarshals Data into v with encoding/json.
func (e *Envelope) Bind(v any) error { return e.BindWith(v, nil) }

// BindWith unmarshals Data into v with unmarshal, a function with the contract of
// encoding/json's Unmarshal (encoding/json's own when nil). Data is never changed while
// the envelope is in use, so unmarshal may keep references into it.
func (e *Envelope) BindWith(v any, unmarshal func(data []byte, v any) error) error {
	if len(e.Data) == 0 {
		return fmt.Errorf("envelope: no data to bind")
	}
	if unmarshal == nil {
		unmarshal = json.Unmarshal
	}
	return unmarshal(e.Data, v)
}

// DataAs unmarshals the envelope's Data into a new value of type T.
func DataAs[T any](e *Envelope) (T, error) {
	var v T
	err := e.Bind(&v)
	return v, err
}

// Accepts applies the consumer acceptance rule: a URN (job or urn), a meta
// block with schema_version equal to [SchemaVersion], a data object, a
// non-blank trace_id and, for a decoded body, an integer attempts member
// (the Python SDK 1.24.0 rejects a missing or null attempts too; a negative
// one is accepted, as there). It returns nil, or an error matching
// [ErrNotAccepted] that says which rule failed.
func (e *Envelope) Accepts() error {
	switch {
	case e == nil:
		return notAccepted("no envelope")
	case blank(e.Job):
		return notAccepted("no URN (job or urn)")
	case e.raw != nil && !e.hasMeta:
		return notAccepted("no meta object")
	case e.Meta.SchemaVersion != SchemaVersion:
		return notAccepted("meta.schema_version " + strconv.Itoa(e.Meta.SchemaVersion) + " is not supported (want 1)")
	case e.raw != nil && !e.dataIsObj:
		return notAccepted("data is not an object")
	case e.raw == nil && !isObjectJSON(e.Data):
		return notAccepted("data is not an object")
	case blank(e.TraceID):
		return notAccepted("trace_id is missing or blank")
	case e.raw != nil && !e.hasAttempts:
		return notAccepted("attempts is missing or null")
	}
	return nil
}

func notAccepted(why string) error { return &acceptError{why} }

type acceptError struct{ why string }

func (a *acceptError) Error() string        { return "envelope: not accepted: " + a.why }
func (a *acceptError) Is(target error) bool { return target == ErrNotAccepted }

// blank reports whether s is empty or only ASCII white space (space, tab,
// LF, VT, FF, CR).
func blank[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\v', '\f', '\r':
		default:
			return false
		}
	}
	return true
}

func isObjectJSON(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}

// Errors returned by this package.
var (
	// ErrPoison matches (errors.Is) every *PoisonError returned by Decode.
	ErrPoison = errors.New("envelope: poison body")
	// ErrNotAccepted matches every error returned by Envelope.Accepts.
	ErrNotAccepted = errors.New("envelope: not accepted")
	// ErrEmptyURN is returned by Make for an empty or blank URN.
	ErrEmptyURN = errors.New("envelope: empty URN")
	// ErrDataNotObject is returned by Make when data does not marshal to a JSON object.
	ErrDataNotObject = errors.New("envelope: data is not a JSON object")
	// ErrNotObject is returned by the byte-level edits for a body that is not
	// one valid JSON object.
	ErrNotObject = errors.New("envelope: body is not a valid JSON object")
)

// Poison reasons: the PoisonError.Reason values.
const (
	ReasonInvalidUTF8  = "invalid_utf8"  // the body is not valid UTF-8
	ReasonInvalidJSON  = "invalid_json"  // not one RFC 8259 JSON value (BOM, NaN, trailing bytes, ...)
	ReasonNotObject    = "not_object"    // valid JSON whose root is not an object
	ReasonWrongType    = "wrong_type"    // a typed member holds the wrong JSON type
	ReasonIdentityLess = "identity_less" // neither a valid string job nor a valid string urn
	ReasonTooDeep      = "too_deep"      // nested deeper than MaxDepth
)

// PoisonError says why a body is poison.
type PoisonError struct {
	// Reason is a short machine word: one of the Reason* constants.
	Reason string
	// Detail is a human-readable explanation.
	Detail string
}

// Error implements error.
func (e *PoisonError) Error() string {
	if e.Detail == "" {
		return "envelope: poison body: " + e.Reason
	}
	return "envelope: poison body: " + e.Reason + ": " + e.Detail
}

// Is makes errors.Is(err, ErrPoison) true.
func (e *PoisonError) Is(target error) bool { return target == ErrPoison }

// Dead-letter reasons.
const (
	ReasonFailed     = "failed"      // the handler failed max_attempts times
	ReasonUnknownURN = "unknown_urn" // no handler for the URN
	ReasonPoison     = "poison"      // the body could not be decoded
)

// DeadLetter is the dead_letter block appended to a dead-lettered message.
type DeadLetter struct {
	// Reason is ReasonFailed, ReasonUnknownURN or ReasonPoison.
	Reason string
	// Error is the error message; nil is written as JSON null.
	Error *string
	// Exception is the error's type name; nil is written as JSON null.
	Exception *string
	// FailedAt is the dead-letter time in Unix ms.
	FailedAt int64
	// OriginalQueue is the queue the message was consumed from.
	OriginalQueue string
	// Attempts is the number of attempts made.
	Attempts int
	// Lang is the SDK that dead-lettered the message; empty is written as "go".
	Lang string
}

// Option configures Make.
type Option func(*options)

type options struct {
	queue     string
	traceID   string
	id        string
	createdAt time.Time
}

// WithQueue sets meta.queue (default "default").
func WithQueue(q string) Option { return func(o *options) { o.queue = q } }

// WithTraceID continues an existing trace instead of minting a new trace_id.
func WithTraceID(id string) Option { return func(o *options) { o.traceID = id } }

// WithID overrides the minted meta.id (for tests).
func WithID(id string) Option { return func(o *options) { o.id = id } }

// WithCreatedAt overrides meta.created_at (for tests).
func WithCreatedAt(t time.Time) Option { return func(o *options) { o.createdAt = t } }

// Make builds a new envelope for urn with data as its payload: a UUID v4
// meta.id, a fresh trace_id unless WithTraceID continues one, meta.lang "go",
// schema_version 1, created_at now (Unix ms) and attempts 0.
//
// data may be any value encoding/json can marshal to a JSON object (a struct,
// a map, a json.RawMessage holding an object, ...). Errors: ErrEmptyURN,
// ErrDataNotObject, or the marshal error wrapped.
func Make(urn string, data any, opts ...Option) (*Envelope, error) {
	if blank(urn) {
		return nil, ErrEmptyURN
	}
	o := options{queue: DefaultQueue}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	raw, err := marshalData(data)
	if err != nil {
		return nil, err
	}
	switch {
	case o.traceID == "" && o.id == "":
		o.traceID, o.id = newUUIDPair()
	case o.traceID == "":
		o.traceID = NewUUID()
	case o.id == "":
		o.id = NewUUID()
	}
	if o.createdAt.IsZero() {
		o.createdAt = time.Now()
	}
	return &Envelope{
		Job:     urn,
		TraceID: o.traceID,
		Data:    raw,
		Meta: Meta{
			ID:            o.id,
			Queue:         o.queue,
			Lang:          Lang,
			SchemaVersion: SchemaVersion,
			CreatedAt:     o.createdAt.UnixMilli(),
		},
	}, nil
}

func marshalData(data any) (json.RawMessage, error) {
	switch d := data.(type) {
	case nil:
		return nil, ErrDataNotObject
	case json.RawMessage:
		return compactObject(d)
	case []byte:
		return compactObject(d)
	}
	m := marshalers.Get().(*marshaler)
	defer m.put()
	if err := m.enc.Encode(data); err != nil {
		return nil, fmt.Errorf("envelope: marshal data: %w", err)
	}
	b := bytes.TrimRight(m.buf.Bytes(), "\n")
	if len(b) == 0 || b[0] != '{' {
		return nil, ErrDataNotObject
	}
	return json.RawMessage(bytes.Clone(b)), nil
}

// marshaler is an encoding/json encoder (no HTML escaping) with its buffer, reused
// across [Make] calls: the data is marshalled into the buffer and copied out once, at
// its size.
type marshaler struct {
	buf bytes.Buffer
	enc *json.Encoder
}

// maxPooledMarshal is the largest buffer a marshaler keeps when it goes back to the
// pool: one large payload does not pin its buffer for the process's lifetime.
const maxPooledMarshal = 64 << 10

var marshalers = sync.Pool{New: func() any {
	m := &marshaler{}
	m.enc = json.NewEncoder(&m.buf)
	m.enc.SetEscapeHTML(false)
	return m
}}

func (m *marshaler) put() {
	if m.buf.Cap() > maxPooledMarshal {
		return
	}
	m.buf.Reset()
	marshalers.Put(m)
}

func compactObject(d []byte) (json.RawMessage, error) {
	var s scanner
	s.b = d
	if _, _, ok := s.scanTop(nil); !ok {
		if s.reason == ReasonNotObject {
			return nil, ErrDataNotObject
		}
		return nil, fmt.Errorf("envelope: marshal data: %w", &PoisonError{Reason: s.reason, Detail: s.detail})
	}
	if s.nonFinite {
		return nil, fmt.Errorf("envelope: marshal data: NaN or Infinity is not JSON")
	}
	if !s.spaced {
		// Already compact: json.Compact would copy it unchanged.
		return json.RawMessage(bytes.Clone(d)), nil
	}
	buf := bytes.NewBuffer(make([]byte, 0, len(d)))
	if err := json.Compact(buf, d); err != nil {
		return nil, fmt.Errorf("envelope: marshal data: %w", err)
	}
	return json.RawMessage(buf.Bytes()), nil
}

// Encode returns the envelope as compact JSON without HTML escaping, members
// in the order job, trace_id, data, meta (id, queue, lang, schema_version,
// created_at), attempts and, when set, dead_letter.
//
// Encode writes the fields; it does not carry unknown members of a decoded
// body. To forward a received message, edit its Raw bytes with SetAttempts
// or AppendDeadLetter instead.
func (e *Envelope) Encode() ([]byte, error) {
	if blank(e.Job) {
		return nil, ErrEmptyURN
	}
	data := e.Data
	if len(data) == 0 {
		data = json.RawMessage("{}")
	} else if !isObjectJSON(data) {
		return nil, ErrDataNotObject
	}
	out := make([]byte, 0, e.encodedSize(len(data)))
	out = append(out, `{"job":`...)
	out = appendString(out, e.Job)
	out = append(out, `,"trace_id":`...)
	out = appendString(out, e.TraceID)
	out = append(out, `,"data":`...)
	out = append(out, data...)
	out = append(out, `,"meta":{"id":`...)
	out = appendString(out, e.Meta.ID)
	out = append(out, `,"queue":`...)
	out = appendString(out, e.Meta.Queue)
	out = append(out, `,"lang":`...)
	out = appendString(out, e.Meta.Lang)
	out = append(out, `,"schema_version":`...)
	out = strconv.AppendInt(out, int64(e.Meta.SchemaVersion), 10)
	out = append(out, `,"created_at":`...)
	out = strconv.AppendInt(out, e.Meta.CreatedAt, 10)
	out = append(out, `},"attempts":`...)
	out = strconv.AppendInt(out, int64(e.Attempts), 10)
	if e.DeadLetter != nil {
		out = append(out, `,"dead_letter":`...)
		out = appendDeadLetter(out, *e.DeadLetter)
	}
	out = append(out, '}')
	return out, nil
}

// frameSize is the length of Encode's frame without its values: the member names,
// the quotes around the string values and the punctuation.
const frameSize = len(`{"job":"","trace_id":"","data":,"meta":{"id":"","queue":"","lang":"","schema_version":,"created_at":},"attempts":}`)

// encodedSize is the length of Encode's output when no string needs an escape (the
// room for three integers counted at their widest), so that Encode allocates once,
// at the body's size, however large the data.
func (e *Envelope) encodedSize(dataLen int) int {
	const intRoom = 20
	n := frameSize + len(e.Job) + len(e.TraceID) + dataLen + len(e.Meta.ID) + len(e.Meta.Queue) + len(e.Meta.Lang) + 3*intRoom
	if dl := e.DeadLetter; dl != nil {
		n += len(`,"dead_letter":{"reason":"","error":,"exception":,"failed_at":,"original_queue":"","attempts":,"lang":""}`) +
			len(dl.Reason) + len(dl.OriginalQueue) + len(dl.Lang) + len(Lang) + 2*intRoom + 2*len(`""`)
		if dl.Error != nil {
			n += len(*dl.Error)
		}
		if dl.Exception != nil {
			n += len(*dl.Exception)
		}
	}
	return n
}

// NewUUID returns a random (version 4) UUID in its canonical text form.
func NewUUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails (Go 1.24+)
	var out [36]byte
	formatUUID(out[:], &u)
	return string(out[:])
}

// newUUIDPair returns two random (version 4) UUIDs, as [NewUUID] does, in one
// allocation, their bytes taken from a chunk of the random source (see [randomChunk]).
func newUUIDPair() (string, string) {
	var u [32]byte
	readRandom(u[:])
	var out [72]byte
	formatUUID(out[:36], (*[16]byte)(u[:16]))
	formatUUID(out[36:], (*[16]byte)(u[16:]))
	s := string(out[:])
	return s[:36], s[36:]
}

// randomChunk holds bytes read from crypto/rand in one call, handed out a few at a
// time: the two UUIDs of a new envelope cost a copy instead of a call into the random
// source each. Bytes are handed out once and cleared as they go.
type randomChunk struct {
	b    [512]byte
	next int
}

var randomChunks = sync.Pool{New: func() any { return &randomChunk{next: 512} }}

// readRandom fills p (at most 512 bytes) with random bytes.
func readRandom(p []byte) {
	c := randomChunks.Get().(*randomChunk)
	if c.next+len(p) > len(c.b) {
		_, _ = rand.Read(c.b[:]) // crypto/rand.Read never fails (Go 1.24+)
		c.next = 0
	}
	used := c.b[c.next : c.next+len(p)]
	copy(p, used)
	clear(used)
	c.next += len(p)
	randomChunks.Put(c)
}

// formatUUID writes the 16 random bytes u, made a version 4 variant 1 UUID, into out
// (36 bytes) in the canonical text form.
func formatUUID(out []byte, u *[16]byte) {
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	const hexd = "0123456789abcdef"
	_ = out[35]
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j], out[j+1] = hexd[c>>4], hexd[c&0x0f]
		j += 2
	}
}

// appendString appends s as a JSON string: compact, no HTML escaping, non-ASCII
// kept as UTF-8; control characters use \b \f \n \r \t or \u00XX; bytes that
// are not UTF-8 become U+FFFD.
func appendString(out []byte, s string) []byte {
	const hexd = "0123456789abcdef"
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < 0x80 {
			i++
			continue
		}
		if c >= 0x80 {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				out = append(out, s[start:i]...)
				out = append(out, "\ufffd"...)
				i += n
				start = i
				continue
			}
			i += n
			continue
		}
		out = append(out, s[start:i]...)
		switch c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			out = append(out, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&0xf])
		}
		i++
		start = i
	}
	out = append(out, s[start:]...)
	return append(out, '"')
}

func appendDeadLetter(out []byte, dl DeadLetter) []byte {
	lang := dl.Lang
	if lang == "" {
		lang = Lang
	}
	out = append(out, `{"reason":`...)
	out = appendString(out, dl.Reason)
	out = append(out, `,"error":`...)
	out = appendNullable(out, dl.Error)
	out = append(out, `,"exception":`...)
	out = appendNullable(out, dl.Exception)
	out = append(out, `,"failed_at":`...)
	out = strconv.AppendInt(out, dl.FailedAt, 10)
	out = append(out, `,"original_queue":`...)
	out = appendString(out, dl.OriginalQueue)
	out = append(out, `,"attempts":`...)
	out = strconv.AppendInt(out, int64(dl.Attempts), 10)
	out = append(out, `,"lang":`...)
	out = appendString(out, lang)
	return append(out, '}')
}

func appendNullable(out []byte, s *string) []byte {
	if s == nil {
		return append(out, "null"...)
	}
	return appendString(out, *s)
}

// MarshalJSON encodes the block in the order reason, error, exception,
// failed_at, original_queue, attempts, lang.
func (dl DeadLetter) MarshalJSON() ([]byte, error) {
	return appendDeadLetter(nil, dl), nil
}
