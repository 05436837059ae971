package envelope

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// memberBuf is the inline capacity for top-level members; more spill to the heap.
const memberBuf = 16

// Decode reads a received body. It never panics and never hangs: a body that
// is not valid UTF-8, not one RFC 8259 JSON value, not an object, nested
// deeper than MaxDepth, has a typed member of the wrong type, or carries no
// identity is poison, reported as a *PoisonError (errors.Is(err, ErrPoison)).
//
// The typed members are checked each time they occur (duplicate keys
// included), matched by their exact, case-sensitive names:
//
//	trace_id                                          string or null
//	data, meta, dead_letter                           object or null
//	attempts                                          int64 integer literal or null
//	meta.id, meta.queue, meta.lang                    string or null
//	meta.schema_version, meta.created_at              int64 integer literal or null
//	dead_letter.reason|error|exception|original_queue|lang   string or null
//	dead_letter.failed_at, dead_letter.attempts       int64 integer literal or null
//
// The identity is the last "job" member when it is a non-blank string,
// otherwise the last "urn" member when it is a non-blank string; a job or urn
// of another type is ignored. Neither gives ReasonIdentityLess.
//
// A body that decodes may still fail Accepts (e.g. schema_version 2, a
// missing trace_id or data). The returned Envelope refers to body (Raw, Data):
// do not modify body afterwards.
func Decode(body []byte) (*Envelope, error) {
	var buf [memberBuf]member
	s := scanner{b: body, nestMeta: true}
	members, close, ok := s.scanTop(buf[:0])
	if !ok {
		return nil, s.poison()
	}
	if s.nonFinite {
		return nil, &PoisonError{Reason: ReasonInvalidJSON, Detail: "NaN or Infinity literal"}
	}
	e := &Envelope{raw: body, spans: editSpans{decoded: true, close: close}}
	var strs stringBatch
	var job, urn *member
	for i := range members {
		m := &members[i]
		if m.nested {
			continue // a meta object's member, read with its meta
		}
		e.spans.members++
		name := keyName(body, m)
		switch name {
		case "job":
			job = m
		case "urn":
			urn = m
		case "trace_id":
			if !stringOrNull(m) {
				return nil, wrongType(name, "a string or null", m)
			}
			strs.add(&e.TraceID, body, m)
		case "data":
			if !objectOrNull(m) {
				return nil, wrongType(name, "an object or null", m)
			}
			if m.kind == kindObject {
				e.Data, e.dataIsObj = body[m.valStart:m.valEnd:m.valEnd], true
			} else {
				e.Data, e.dataIsObj = nil, false
			}
		case "attempts":
			n, ok := intOrNull(body, m)
			if !ok {
				return nil, wrongType(name, wantInt, m)
			}
			e.Attempts, e.hasAttempts = int(n), m.kind == kindNumber
			e.spans.attempts = e.spans.attempts.add(m)
		case "meta":
			if !objectOrNull(m) {
				return nil, wrongType(name, "an object or null", m)
			}
			e.Meta, e.hasMeta = Meta{}, false
			strs.drop(&e.Meta.ID, &e.Meta.Queue, &e.Meta.Lang) // a later meta replaces an earlier one whole
			if m.kind == kindObject {
				if err := decodeMeta(body, members[m.subStart:m.subEnd], &e.Meta, &strs); err != nil {
					return nil, err
				}
				e.hasMeta = true
			}
		case "dead_letter":
			if !objectOrNull(m) {
				return nil, wrongType(name, "an object or null", m)
			}
			e.DeadLetter = nil
			e.spans.deadLetter = e.spans.deadLetter.add(m)
			if m.kind == kindObject {
				dl := new(DeadLetter)
				if err := decodeDeadLetter(body[m.valStart:m.valEnd], dl); err != nil {
					return nil, err
				}
				e.DeadLetter = dl
			}
		}
	}
	switch {
	case job != nil && job.kind == kindString && !blankString(body, job):
		strs.add(&e.Job, body, job)
	case urn != nil && urn.kind == kindString && !blankString(body, urn):
		strs.add(&e.Job, body, urn)
	default:
		return nil, &PoisonError{Reason: ReasonIdentityLess, Detail: "neither a non-blank string job nor a non-blank string urn"}
	}
	strs.fill()
	return e, nil
}

// blankString reports whether a string member's decoded value is blank.
func blankString(b []byte, m *member) bool {
	if m.valEsc {
		return blank(stringValue(b, m))
	}
	return blank(b[m.valStart+1 : m.valEnd-1])
}

// stringBatch decodes the envelope's string members into one allocation: their raw
// bytes are copied into a single string and each member is a substring of it. A member
// with escapes is unescaped on its own.
type stringBatch struct {
	n    int
	size int
	reqs [8]struct {
		dst *string
		raw []byte
	}
}

// add schedules the value of a string member (or "" for null) to be stored in dst. A
// later add for the same dst replaces an earlier one (the last duplicate key wins).
func (sb *stringBatch) add(dst *string, b []byte, m *member) {
	sb.drop(dst)
	if m.kind != kindString || m.valEsc || sb.n == len(sb.reqs) {
		*dst = stringValue(b, m)
		return
	}
	raw := b[m.valStart+1 : m.valEnd-1]
	sb.reqs[sb.n].dst, sb.reqs[sb.n].raw = dst, raw
	sb.n++
	sb.size += len(raw)
}

// drop forgets what was scheduled for dsts.
func (sb *stringBatch) drop(dsts ...*string) {
	for _, dst := range dsts {
		for i := range sb.n {
			if sb.reqs[i].dst == dst {
				sb.size -= len(sb.reqs[i].raw)
				sb.reqs[i] = sb.reqs[sb.n-1]
				sb.n--
				break
			}
		}
	}
}

// fill makes the one allocation and stores every scheduled value.
func (sb *stringBatch) fill() {
	if sb.n == 0 {
		return
	}
	var all strings.Builder
	all.Grow(sb.size)
	for i := range sb.n {
		all.Write(sb.reqs[i].raw)
	}
	s, at := all.String(), 0
	for i := range sb.n {
		n := len(sb.reqs[i].raw)
		*sb.reqs[i].dst = s[at : at+n]
		at += n
	}
}

// poison turns a scanner failure into a PoisonError. Invalid UTF-8 anywhere
// in the body wins over every other reason.
func (s *scanner) poison() *PoisonError {
	if s.reason != ReasonInvalidUTF8 && !utf8.Valid(s.b) {
		return &PoisonError{Reason: ReasonInvalidUTF8, Detail: "the body is not valid UTF-8"}
	}
	if s.reason == ReasonNotObject {
		return &PoisonError{Reason: s.reason, Detail: s.detail}
	}
	return &PoisonError{Reason: s.reason, Detail: fmt.Sprintf("%s at byte %d", s.detail, s.errAt)}
}

// wantInt describes the integer members.
const wantInt = "an int64 integer or null"

func wrongType(name, want string, m *member) error {
	got := article(m.kind)
	switch {
	case m.kind == kindNumber && !m.intLit:
		got = "a number with a fraction or exponent"
	case m.kind == kindNumber && want == wantInt:
		got = "an integer outside int64"
	}
	return &PoisonError{Reason: ReasonWrongType, Detail: fmt.Sprintf("member %q must be %s, got %s", name, want, got)}
}

func keyName(b []byte, m *member) string {
	if m.keyEsc {
		return unescape(b[m.keyStart:m.keyEnd])
	}
	k := b[m.keyStart:m.keyEnd]
	// Only the typed names matter; compare without allocating.
	switch string(k) {
	case "job":
		return "job"
	case "urn":
		return "urn"
	case "trace_id":
		return "trace_id"
	case "data":
		return "data"
	case "meta":
		return "meta"
	case "attempts":
		return "attempts"
	case "dead_letter":
		return "dead_letter"
	case "id":
		return "id"
	case "queue":
		return "queue"
	case "lang":
		return "lang"
	case "schema_version":
		return "schema_version"
	case "created_at":
		return "created_at"
	case "reason":
		return "reason"
	case "error":
		return "error"
	case "exception":
		return "exception"
	case "failed_at":
		return "failed_at"
	case "original_queue":
		return "original_queue"
	}
	return ""
}

func stringOrNull(m *member) bool { return m.kind == kindString || m.kind == kindNull }
func objectOrNull(m *member) bool { return m.kind == kindObject || m.kind == kindNull }

// stringValue is the decoded value of a string member ("" for null).
func stringValue(b []byte, m *member) string {
	if m.kind != kindString {
		return ""
	}
	raw := b[m.valStart+1 : m.valEnd-1]
	if m.valEsc {
		return unescape(raw)
	}
	return string(raw)
}

// intOrNull reads an int64 integer literal (0 for null).
func intOrNull(b []byte, m *member) (int64, bool) {
	switch m.kind {
	case kindNull:
		return 0, true
	case kindNumber:
		if !m.intLit {
			return 0, false
		}
		return parseInt64(b[m.valStart:m.valEnd])
	}
	return 0, false
}

// parseInt64 parses a validated JSON integer literal, failing on overflow.
func parseInt64(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		u = u*10 + uint64(c-'0')
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// members scans an object already validated by the outer scan.
func membersOf(obj []byte, buf []member) []member {
	s := scanner{b: obj, maxDepth: MaxDepth + 1}
	out, _, _ := s.scanTop(buf)
	return out
}

// decodeMeta reads the members ms of a meta object of b (recorded by the scan of b).
func decodeMeta(obj []byte, ms []member, meta *Meta, strs *stringBatch) error {
	for i := range ms {
		m := &ms[i]
		switch name := keyName(obj, m); name {
		case "id", "queue", "lang":
			if !stringOrNull(m) {
				return wrongType("meta."+name, "a string or null", m)
			}
			switch name {
			case "id":
				strs.add(&meta.ID, obj, m)
			case "queue":
				strs.add(&meta.Queue, obj, m)
			default:
				strs.add(&meta.Lang, obj, m)
			}
		case "schema_version", "created_at":
			n, ok := intOrNull(obj, m)
			if !ok {
				return wrongType("meta."+name, wantInt, m)
			}
			if name == "created_at" {
				meta.CreatedAt = n
			} else {
				meta.SchemaVersion = int(n)
			}
		}
	}
	return nil
}

func decodeDeadLetter(obj []byte, dl *DeadLetter) error {
	var buf [8]member
	for i, ms := 0, membersOf(obj, buf[:0]); i < len(ms); i++ {
		m := &ms[i]
		switch name := keyName(obj, m); name {
		case "reason", "error", "exception", "original_queue", "lang":
			if !stringOrNull(m) {
				return wrongType("dead_letter."+name, "a string or null", m)
			}
			v := stringValue(obj, m)
			switch name {
			case "reason":
				dl.Reason = v
			case "original_queue":
				dl.OriginalQueue = v
			case "lang":
				dl.Lang = v
			case "error":
				dl.Error = nil
				if m.kind == kindString {
					dl.Error = &v
				}
			default:
				dl.Exception = nil
				if m.kind == kindString {
					dl.Exception = &v
				}
			}
		case "failed_at", "attempts":
			n, ok := intOrNull(obj, m)
			if !ok {
				return wrongType("dead_letter."+name, wantInt, m)
			}
			if name == "failed_at" {
				dl.FailedAt = n
			} else {
				dl.Attempts = int(n)
			}
		}
	}
	return nil
}

// PeekAttempts reads the top-level attempts of body without decoding the
// rest. It reports false when the body is not a valid JSON object or its
// (last) attempts member is absent or not an int64 integer.
func PeekAttempts(body []byte) (int, bool) {
	var buf [memberBuf]member
	s := scanner{b: body}
	members, _, ok := s.scanTop(buf[:0])
	if !ok || s.nonFinite {
		return 0, false
	}
	found, val := false, int64(0)
	for i := range members {
		m := &members[i]
		if m.keyIs(body, "attempts") {
			n, ok := intOrNull(body, m)
			found, val = ok && m.kind == kindNumber, n
		}
	}
	return int(val), found
}

// editable scans body for the byte-level edits: one valid JSON object.
func editable(body []byte, buf []member) ([]member, int, error) {
	s := scanner{b: body}
	members, close, ok := s.scanTop(buf)
	if !ok {
		return nil, 0, fmt.Errorf("%w: %v", ErrNotObject, s.poison())
	}
	if s.nonFinite {
		return nil, 0, fmt.Errorf("%w: NaN or Infinity literal", ErrNotObject)
	}
	return members, close, nil
}

// replaceOrAppend replaces the value of every top-level member called name
// with val, or, when there is none, inserts "name":val before the closing
// brace. Every other byte of body is kept.
func replaceOrAppend(body []byte, members []member, close int, name string, val []byte) []byte {
	out := make([]byte, 0, len(body)+len(name)+len(val)+4)
	last, replaced := 0, false
	for i := range members {
		m := &members[i]
		if m.keyIs(body, name) {
			out = append(out, body[last:m.valStart]...)
			out = append(out, val...)
			last, replaced = m.valEnd, true
		}
	}
	if replaced {
		return append(out, body[last:]...)
	}
	out = append(out, body[:close]...)
	if len(members) > 0 {
		out = append(out, ',')
	}
	out = append(out, '"')
	out = append(out, name...)
	out = append(out, '"', ':')
	out = append(out, val...)
	return append(out, body[close:]...)
}

// SetAttempts returns body with the value of its top-level "attempts" member
// replaced by n (every occurrence, when the name repeats), or with
// "attempts":n inserted before the closing brace when there is none. Every
// other byte is kept. body must be one valid JSON object (ErrNotObject) and
// n must not be negative.
func SetAttempts(body []byte, n int) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("envelope: negative attempts %d", n)
	}
	var buf [memberBuf]member
	members, close, err := editable(body, buf[:0])
	if err != nil {
		return nil, err
	}
	return replaceOrAppend(body, members, close, "attempts", strconv.AppendInt(nil, int64(n), 10)), nil
}

// AppendDeadLetter returns body with a top-level "dead_letter" member holding
// dl inserted before the closing brace; a body that already has one gets its
// value replaced in place. Every other byte is kept. body must be one valid
// JSON object (ErrNotObject). An empty dl.Lang is written as "go".
func AppendDeadLetter(body []byte, dl DeadLetter) ([]byte, error) {
	var buf [memberBuf]member
	members, close, err := editable(body, buf[:0])
	if err != nil {
		return nil, err
	}
	return replaceOrAppend(body, members, close, "dead_letter", appendDeadLetter(nil, dl)), nil
}

// PoisonBody builds the dead-letter body for a poison body (docs/settlement.md, Poison). When
// body is a strict RFC 8259 object (valid UTF-8, no NaN/Infinity literal, no
// unpaired surrogate escape, nesting within MaxDepth, no top-level
// dead_letter member) the block is spliced in: every original byte is kept
// and a "dead_letter" member is inserted before the closing brace. Otherwise
// the body is wrapped as {"raw":"<body>","dead_letter":{...}}, or, when it is
// not valid UTF-8, {"raw":"<standard base64>","raw_encoding":"base64",
// "dead_letter":{...}}. dl.Reason is forced to "poison".
func PoisonBody(body []byte, dl DeadLetter) []byte {
	dl.Reason = ReasonPoison
	var buf [memberBuf]member
	s := scanner{b: body}
	members, close, ok := s.scanTop(buf[:0])
	if ok && !s.nonFinite && !s.loneSurrogate {
		has := false
		for i := range members {
			if members[i].keyIs(body, "dead_letter") {
				has = true
				break
			}
		}
		if !has {
			return replaceOrAppend(body, members, close, "dead_letter", appendDeadLetter(nil, dl))
		}
	}
	var out []byte
	if utf8.Valid(body) {
		out = make([]byte, 0, len(body)+len(body)/8+200)
		out = append(out, `{"raw":`...)
		out = appendString(out, string(body))
	} else {
		out = make([]byte, 0, base64.StdEncoding.EncodedLen(len(body))+240)
		out = append(out, `{"raw":"`...)
		out = base64.StdEncoding.AppendEncode(out, body)
		out = append(out, `","raw_encoding":"base64"`...)
	}
	out = append(out, `,"dead_letter":`...)
	out = appendDeadLetter(out, dl)
	return append(out, '}')
}

// PoisonDeadLetter is the dead_letter block for a poison body: reason
// "poison", the poison error's text and type name, lang "go".
func PoisonDeadLetter(cause error, originalQueue string, attempts int, failedAtMs int64) DeadLetter {
	dl := DeadLetter{Reason: ReasonPoison, FailedAt: failedAtMs, OriginalQueue: originalQueue, Attempts: attempts, Lang: Lang}
	if cause != nil {
		msg, typ := cause.Error(), fmt.Sprintf("%T", cause)
		dl.Error, dl.Exception = &msg, &typ
	}
	return dl
}
