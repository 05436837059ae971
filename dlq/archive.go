package dlq

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"unicode/utf8"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// ExportVersion is the version of the export format that [Writer] writes and [Reader]
// reads: the v member of every line.
const ExportVersion = 1

// Record is one line of an export: one message of a queue exactly as the broker held
// it (body, key, out-of-band headers, attempts header), and, for people and tools
// such as jq, what it is (meta.id, URN, dead_letter reason, …). [Import] writes a
// record back from its exact members and ignores the descriptive ones.
//
// Bytes are kept exactly: a body that is valid UTF-8 rides as the JSON string body
// (JSON escapes decode to the same bytes), any other body as body_base64 (standard
// base64). A key is null for no key, "" for an empty key, or key_base64 when it is not
// UTF-8.
type Record struct {
	// V is the format version, [ExportVersion].
	V int `json:"v"`
	// Queue is the queue the message was read from.
	Queue string `json:"queue"`

	// ID, URN, Reason, Lang, OriginalQueue and FailedAt describe the message (see
	// [Entry]); empty when it does not say (a poison body has no meta.id).
	ID            string `json:"id,omitempty"`
	URN           string `json:"urn,omitempty"`
	Reason        string `json:"reason,omitempty"`
	Lang          string `json:"lang,omitempty"`
	OriginalQueue string `json:"original_queue,omitempty"`
	FailedAt      int64  `json:"failed_at,omitempty"`

	// Key is the record key when it is UTF-8: nil for no key.
	Key *string `json:"key"`
	// KeyBase64 is the key in standard base64 when it is not UTF-8.
	KeyBase64 string `json:"key_base64,omitempty"`
	// Headers are the message's out-of-band headers.
	Headers map[string]string `json:"headers,omitempty"`
	// AttemptsHeader is the binding's attempts header (bq-attempts, x-attempts…) when
	// the message carried one: for a poison body it is the only count there is.
	AttemptsHeader *int `json:"attempts_header,omitempty"`
	// Body is the body when it is valid UTF-8.
	Body *string `json:"body,omitempty"`
	// BodyBase64 is the body in standard base64 when it is not.
	BodyBase64 *string `json:"body_base64,omitempty"`
}

// RecordOf makes the export record of a message read from a queue.
func RecordOf(e *Entry) Record {
	d := e.Delivery
	r := Record{
		V: ExportVersion, Queue: d.Queue, ID: e.ID(), URN: e.URN(), Reason: e.Reason(), Lang: e.Lang(),
		OriginalQueue: e.OriginalQueue(), Headers: d.Headers,
	}
	if e.DeadLetter != nil && e.DeadLetter.FailedAt > 0 {
		r.FailedAt = e.DeadLetter.FailedAt
	}
	switch {
	case d.Key == nil:
	case utf8.Valid(d.Key):
		k := string(d.Key)
		r.Key = &k
	default:
		r.KeyBase64 = base64.StdEncoding.EncodeToString(d.Key)
	}
	if d.HasAttemptsHeader {
		n := d.AttemptsHeader
		r.AttemptsHeader = &n
	}
	if utf8.Valid(d.Body) {
		b := string(d.Body)
		r.Body = &b
	} else {
		b := base64.StdEncoding.EncodeToString(d.Body)
		r.BodyBase64 = &b
	}
	return r
}

// Bytes returns the body and the key the record holds (a nil key is no key).
func (r Record) Bytes() (body, key []byte, err error) {
	switch {
	case r.Body != nil && r.BodyBase64 != nil:
		return nil, nil, errors.New("both body and body_base64")
	case r.Body != nil:
		body = []byte(*r.Body)
	case r.BodyBase64 != nil:
		if body, err = base64.StdEncoding.DecodeString(*r.BodyBase64); err != nil {
			return nil, nil, fmt.Errorf("body_base64: %w", err)
		}
	default:
		return nil, nil, errors.New("no body (want body or body_base64)")
	}
	switch {
	case r.Key != nil && r.KeyBase64 != "":
		return nil, nil, errors.New("both key and key_base64")
	case r.Key != nil:
		key = []byte(*r.Key)
	case r.KeyBase64 != "":
		if key, err = base64.StdEncoding.DecodeString(r.KeyBase64); err != nil {
			return nil, nil, fmt.Errorf("key_base64: %w", err)
		}
	}
	return body, key, nil
}

// Message returns the write that puts the record back on queue (empty: the queue it
// was exported from): the body, key and headers exactly as exported, the attempts
// header as it was, and the envelope's fields projected again for the broker's own
// properties when the body is an envelope.
func (r Record) Message(queue string) (*transport.Message, error) {
	body, key, err := r.Bytes()
	if err != nil {
		return nil, err
	}
	if queue == "" {
		queue = r.Queue
	}
	if queue == "" {
		return nil, errors.New("the record names no queue; choose one to write it to")
	}
	m := &transport.Message{Queue: queue, Body: body, Key: key, Headers: maps.Clone(r.Headers)}
	if env, err := envelope.Decode(body); err == nil {
		m.Attempts = env.Attempts
		m.Projection = transport.ProjectionOf(env)
	}
	if r.AttemptsHeader != nil {
		m.Attempts = *r.AttemptsHeader
	}
	return m, nil
}

// Writer writes an export: one [Record] per line (JSON lines). Each line goes to the
// underlying writer in one Write call, so a process killed while exporting to a file
// leaves whole lines only.
type Writer struct {
	w   io.Writer
	buf bytes.Buffer
	n   int
}

// NewWriter returns a Writer on w. When w has a Sync method (an *os.File), [Writer.Sync]
// calls it, so that what [Purge] archives is on disk before it is removed.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes the record of e.
func (w *Writer) Write(e *Entry) error { return w.WriteRecord(RecordOf(e)) }

// WriteRecord writes one record.
func (w *Writer) WriteRecord(r Record) error {
	w.buf.Reset()
	enc := json.NewEncoder(&w.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil { // Encode ends the line
		return fmt.Errorf("dlq: export: %w", err)
	}
	if _, err := w.w.Write(w.buf.Bytes()); err != nil {
		return fmt.Errorf("dlq: export: %w", err)
	}
	w.n++
	return nil
}

// Sync makes what was written durable when the underlying writer can (it has a
// Sync() error method, as *os.File has); otherwise it does nothing.
func (w *Writer) Sync() error {
	if s, ok := w.w.(interface{ Sync() error }); ok {
		if err := s.Sync(); err != nil {
			return fmt.Errorf("dlq: export: sync: %w", err)
		}
	}
	return nil
}

// Count returns how many records were written.
func (w *Writer) Count() int { return w.n }

// ErrBadExport matches every error of [Reader.Next] about what an export holds.
var ErrBadExport = errors.New("dlq: bad export")

// ExportError is the typed form of [ErrBadExport]: it names the line at fault.
type ExportError struct {
	// Line is the line's number, from 1.
	Line int
	// Err says what is wrong with it.
	Err error
}

// Error describes the fault.
func (e *ExportError) Error() string { return fmt.Sprintf("dlq: export line %d: %v", e.Line, e.Err) }

// Unwrap returns the cause.
func (e *ExportError) Unwrap() error { return e.Err }

// Is makes the error match [ErrBadExport].
func (e *ExportError) Is(target error) bool { return target == ErrBadExport }

// Reader reads an export that [Writer] wrote. Lines of any length are read; blank
// lines are skipped.
type Reader struct {
	r    *bufio.Reader
	line int
}

// NewReader returns a Reader on r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 64<<10)} }

// Next returns the next record, or io.EOF after the last. A line that is not a record
// of a version this package reads, or whose body or key cannot be decoded, is an
// [*ExportError].
func (r *Reader) Next() (Record, error) {
	for {
		line, err := r.r.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			if err == io.EOF {
				return Record{}, io.EOF
			}
			return Record{}, fmt.Errorf("dlq: export: read: %w", err)
		}
		r.line++
		if err != nil && err != io.EOF {
			return Record{}, fmt.Errorf("dlq: export: read: %w", err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var rec Record
		if derr := json.Unmarshal(line, &rec); derr != nil {
			return Record{}, &ExportError{Line: r.line, Err: fmt.Errorf("not a JSON record: %w", derr)}
		}
		if rec.V != ExportVersion {
			return Record{}, &ExportError{Line: r.line, Err: fmt.Errorf("format version %d, want %d", rec.V, ExportVersion)}
		}
		if _, _, berr := rec.Bytes(); berr != nil {
			return Record{}, &ExportError{Line: r.line, Err: berr}
		}
		return rec, nil
	}
}

// Line returns the number of the line the last record came from.
func (r *Reader) Line() int { return r.line }
