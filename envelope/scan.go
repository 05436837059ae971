package envelope

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// valueKind is the JSON type of a scanned value.
type valueKind uint8

const (
	kindNone valueKind = iota
	kindString
	kindNumber
	kindObject
	kindArray
	kindTrue
	kindFalse
	kindNull
	kindNonFinite // NaN, Infinity or -Infinity: not JSON, flagged by the scanner
)

func (k valueKind) String() string {
	switch k {
	case kindString:
		return "string"
	case kindNumber:
		return "number"
	case kindObject:
		return "object"
	case kindArray:
		return "array"
	case kindTrue, kindFalse:
		return "boolean"
	case kindNull:
		return "null"
	case kindNonFinite:
		return "non-finite number"
	}
	return "nothing"
}

// member is one object member found by the scanner, as byte spans of the body.
type member struct {
	keyStart, keyEnd int // key content, without the quotes
	valStart, valEnd int // the whole value, quotes and brackets included
	kind             valueKind
	keyEsc           bool // the key holds escapes
	valEsc           bool // a string value holds escapes
	intLit           bool // a number with no fraction and no exponent
	// A top-level "meta" object's members, when the scanner nests: recorded in the
	// same list, just before the meta member itself, from subStart to subEnd, each
	// marked nested.
	nested           bool
	subStart, subEnd int
}

// scanner is a single-pass JSON validator. It checks structure, strings
// (escapes and UTF-8), numbers and depth, and records the members of the
// outermost object.
type scanner struct {
	b     []byte
	i     int
	depth int
	// maxDepth is the deepest nesting allowed (MaxDepth unless a test lowers it).
	maxDepth int

	// nestMeta makes the scan record the members of each top-level "meta" object too
	// (Decode reads them without a second scan of the object).
	nestMeta bool

	nonFinite     bool // a NaN/Infinity literal was seen
	spaced        bool // insignificant white space was skipped (the text is not compact)
	loneSurrogate bool // an unpaired \uD800-\uDFFF escape was seen
	badUTF8       bool // a string held bytes that are not UTF-8

	reason string // set on failure
	detail string
	errAt  int
}

// strPlain marks bytes that can be skipped without a second look inside a
// JSON string: printable ASCII other than the quote and the backslash.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return
}()

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *scanner) fail(reason, detail string) bool {
	if s.reason == "" {
		s.reason, s.detail, s.errAt = reason, detail, s.i
	}
	return false
}

func (s *scanner) skipSpace() {
	i, b := s.i, s.b
	// Compact JSON has no white space: a byte above ' ' ends the loop on one test.
	for i < len(b) && b[i] <= ' ' && isSpace(b[i]) {
		i++
	}
	if i != s.i {
		s.spaced = true
	}
	s.i = i
}

// scanTop scans body as one JSON text. When it is an object, the members of
// that object are appended to members and close is the index of its closing
// brace. On failure s.reason says why.
func (s *scanner) scanTop(members []member) (out []member, close int, ok bool) {
	if s.maxDepth == 0 {
		s.maxDepth = MaxDepth
	}
	s.skipSpace()
	if s.i >= len(s.b) {
		return members, -1, s.fail(ReasonInvalidJSON, "empty body")
	}
	if s.b[s.i] != '{' {
		k, ok := s.value()
		if !ok {
			return members, -1, false
		}
		s.skipSpace()
		if s.i != len(s.b) {
			return members, -1, s.fail(ReasonInvalidJSON, "extra data after the JSON value")
		}
		return members, -1, s.fail(ReasonNotObject, "top-level value is "+article(k))
	}
	out, ok = s.object(members, true)
	if !ok {
		return out, -1, false
	}
	close = s.i - 1
	s.skipSpace()
	if s.i != len(s.b) {
		return out, close, s.fail(ReasonInvalidJSON, "extra data after the object")
	}
	return out, close, true
}

func article(k valueKind) string {
	switch k {
	case kindArray:
		return "an array"
	case kindObject:
		return "an object"
	case kindNonFinite:
		return "a non-finite number"
	}
	return "a " + k.String()
}

// value scans one value at s.i (leading white space already skipped).
func (s *scanner) value() (valueKind, bool) {
	if s.i >= len(s.b) {
		return kindNone, s.fail(ReasonInvalidJSON, "unexpected end of input")
	}
	switch c := s.b[s.i]; c {
	case '{':
		_, ok := s.object(nil, false)
		return kindObject, ok
	case '[':
		return kindArray, s.array()
	case '"':
		_, ok := s.str()
		return kindString, ok
	case 't':
		return kindTrue, s.lit("true")
	case 'f':
		return kindFalse, s.lit("false")
	case 'n':
		return kindNull, s.lit("null")
	case 'N':
		if s.lit("NaN") {
			s.nonFinite = true
			return kindNonFinite, true
		}
		return kindNone, false
	case 'I':
		if s.lit("Infinity") {
			s.nonFinite = true
			return kindNonFinite, true
		}
		return kindNone, false
	default:
		if c == '-' && s.i+1 < len(s.b) && s.b[s.i+1] == 'I' {
			s.i++
			if s.lit("Infinity") {
				s.nonFinite = true
				return kindNonFinite, true
			}
			return kindNone, false
		}
		if c == '-' || (c >= '0' && c <= '9') {
			_, ok := s.number()
			return kindNumber, ok
		}
		return kindNone, s.fail(ReasonInvalidJSON, "unexpected byte")
	}
}

func (s *scanner) lit(w string) bool {
	if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
		s.i += len(w)
		return true
	}
	return s.fail(ReasonInvalidJSON, "invalid literal")
}

// number scans an RFC 8259 number; intLit reports that it has neither a
// fraction nor an exponent.
func (s *scanner) number() (intLit bool, ok bool) {
	b, i := s.b, s.i
	if b[i] == '-' {
		i++
	}
	if i >= len(b) {
		s.i = i
		return false, s.fail(ReasonInvalidJSON, "truncated number")
	}
	switch {
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		s.i = i
		return false, s.fail(ReasonInvalidJSON, "invalid number")
	}
	intLit = true
	if i < len(b) && b[i] == '.' {
		intLit = false
		i++
		st := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == st {
			s.i = i
			return false, s.fail(ReasonInvalidJSON, "invalid number fraction")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		intLit = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		st := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == st {
			s.i = i
			return false, s.fail(ReasonInvalidJSON, "invalid number exponent")
		}
	}
	s.i = i
	return intLit, true
}

const (
	ones8  = 0x0101010101010101
	highs8 = 0x8080808080808080
)

// notPlain8 flags the bytes of x (eight string bytes, the first in the low byte) that
// strPlain does not cover: the quote, the backslash, control characters and non-ASCII.
// The lowest flag is always a real one (a false flag only follows a real one), so
// bits.TrailingZeros64 of a non-zero result finds the first such byte.
func notPlain8(x uint64) uint64 {
	quote := x ^ (ones8 * '"')
	slash := x ^ (ones8 * '\\')
	return (((quote - ones8) &^ quote) | // a zero byte of quote: '"'
		((slash - ones8) &^ slash) | // a zero byte of slash: '\\'
		((x - ones8*0x20) &^ x) | // a byte below 0x20
		x) & highs8 // non-ASCII
}

// utf8Short is the length of the well-formed two- or three-byte UTF-8 sequence that b
// starts with, or 0 (four-byte sequences and errors are left to utf8.DecodeRune). The
// ranges are those of RFC 3629: no overlong forms, no surrogates.
func utf8Short(b []byte) int {
	c := b[0]
	switch {
	case c >= 0xC2 && c < 0xE0:
		if len(b) >= 2 && b[1]&0xC0 == 0x80 {
			return 2
		}
	case c >= 0xE0 && c < 0xF0:
		if len(b) < 3 || b[2]&0xC0 != 0x80 {
			return 0
		}
		lo, hi := byte(0x80), byte(0xBF)
		switch c {
		case 0xE0:
			lo = 0xA0
		case 0xED:
			hi = 0x9F
		}
		if b[1] >= lo && b[1] <= hi {
			return 3
		}
	}
	return 0
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func (s *scanner) hex4(at int) int {
	if at+4 > len(s.b) {
		return -1
	}
	v := 0
	for _, c := range s.b[at : at+4] {
		h := hexVal(c)
		if h < 0 {
			return -1
		}
		v = v<<4 | h
	}
	return v
}

// str scans a string starting at its opening quote; esc reports escapes.
func (s *scanner) str() (esc bool, ok bool) {
	b := s.b
	i := s.i + 1
	for {
		if i+8 <= len(b) {
			// Eight bytes at a time while they are plain; else straight to the first
			// byte that is not.
			m := notPlain8(binary.LittleEndian.Uint64(b[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		} else {
			for i < len(b) && strPlain[b[i]] {
				i++
			}
			if i >= len(b) {
				s.i = i
				return esc, s.fail(ReasonInvalidJSON, "unterminated string")
			}
		}
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return esc, true
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				s.i = i
				return esc, s.fail(ReasonInvalidJSON, "unterminated escape")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				v := s.hex4(i + 2)
				if v < 0 {
					s.i = i
					return esc, s.fail(ReasonInvalidJSON, "invalid \\u escape")
				}
				i += 6
				switch {
				case v >= 0xD800 && v < 0xDC00:
					// A high surrogate must be followed by a low one.
					if i+1 < len(b) && b[i] == '\\' && b[i+1] == 'u' {
						if w := s.hex4(i + 2); w >= 0xDC00 && w < 0xE000 {
							i += 6
							continue
						}
					}
					s.loneSurrogate = true
				case v >= 0xDC00 && v < 0xE000:
					s.loneSurrogate = true
				}
			default:
				s.i = i
				return esc, s.fail(ReasonInvalidJSON, "invalid escape")
			}
		case c < 0x20:
			s.i = i
			return esc, s.fail(ReasonInvalidJSON, "control character in string")
		default: // non-ASCII: must be well-formed UTF-8
			if n := utf8Short(b[i:]); n > 0 {
				i += n
				continue
			}
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n <= 1 {
				s.badUTF8 = true
				s.i = i
				return esc, s.fail(ReasonInvalidUTF8, "invalid UTF-8 in a string")
			}
			i += n
		}
	}
}

func (s *scanner) array() bool {
	s.depth++
	if s.depth > s.maxDepth {
		return s.fail(ReasonTooDeep, "nesting deeper than the limit")
	}
	s.i++ // '['
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return true
	}
	for {
		s.skipSpace()
		if _, ok := s.value(); !ok {
			return false
		}
		s.skipSpace()
		if s.i >= len(s.b) {
			return s.fail(ReasonInvalidJSON, "unterminated array")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			s.depth--
			return true
		default:
			return s.fail(ReasonInvalidJSON, "expected ',' or ']' in an array")
		}
	}
}

// object scans an object; when record is set its members are appended to
// members (only the outermost object is recorded).
func (s *scanner) object(members []member, record bool) ([]member, bool) {
	s.depth++
	if s.depth > s.maxDepth {
		return members, s.fail(ReasonTooDeep, "nesting deeper than the limit")
	}
	s.i++ // '{'
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return members, true
	}
	for {
		s.skipSpace()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return members, s.fail(ReasonInvalidJSON, "expected a member name")
		}
		var m member
		m.keyStart = s.i + 1
		esc, ok := s.str()
		if !ok {
			return members, false
		}
		m.keyEnd, m.keyEsc = s.i-1, esc
		s.skipSpace()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return members, s.fail(ReasonInvalidJSON, "expected ':' after a member name")
		}
		s.i++
		s.skipSpace()
		m.valStart = s.i
		if record {
			if s.i < len(s.b) {
				switch c := s.b[s.i]; {
				case c == '{' && s.nestMeta && m.keyIs(s.b, "meta"):
					m.kind, m.subStart = kindObject, len(members)
					s.nestMeta = false // only the top level's meta
					members, ok = s.object(members, true)
					s.nestMeta = true
					m.subEnd = len(members)
					for k := m.subStart; k < m.subEnd; k++ {
						members[k].nested = true
					}
				case c == '"':
					m.kind = kindString
					m.valEsc, ok = s.str()
				case c == '-' || (c >= '0' && c <= '9'):
					if c == '-' && s.i+1 < len(s.b) && s.b[s.i+1] == 'I' {
						m.kind, ok = s.value()
					} else {
						m.kind = kindNumber
						m.intLit, ok = s.number()
					}
				default:
					m.kind, ok = s.value()
				}
			} else {
				m.kind, ok = s.value()
			}
		} else {
			_, ok = s.value()
		}
		if !ok {
			return members, false
		}
		if record {
			m.valEnd = s.i
			members = append(members, m)
		}
		s.skipSpace()
		if s.i >= len(s.b) {
			return members, s.fail(ReasonInvalidJSON, "unterminated object")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			s.depth--
			return members, true
		default:
			return members, s.fail(ReasonInvalidJSON, "expected ',' or '}' in an object")
		}
	}
}

// keyIs reports whether the member's name, unescaped, equals name.
func (m *member) keyIs(b []byte, name string) bool {
	if !m.keyEsc {
		return string(b[m.keyStart:m.keyEnd]) == name
	}
	return unescape(b[m.keyStart:m.keyEnd]) == name
}

// unescape decodes the content of a JSON string already validated by the
// scanner. An unpaired surrogate becomes U+FFFD.
func unescape(raw []byte) string {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		switch raw[i+1] {
		case '"', '\\', '/':
			out = append(out, raw[i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			v := hex4(raw[i+2 : i+6])
			i += 6
			if v >= 0xD800 && v < 0xDC00 && i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
				if w := hex4(raw[i+2 : i+6]); w >= 0xDC00 && w < 0xE000 {
					out = utf8.AppendRune(out, rune((v-0xD800)<<10|(w-0xDC00))+0x10000)
					i += 6
					continue
				}
			}
			if v >= 0xD800 && v < 0xE000 {
				v = utf8.RuneError
			}
			out = utf8.AppendRune(out, rune(v))
			continue
		}
		i += 2
	}
	return string(out)
}

func hex4(b []byte) int {
	v := 0
	for _, c := range b {
		v = v<<4 | hexVal(c)
	}
	return v
}
