package driverkit

import (
	"math"
	"unicode/utf8"
)

// Attempts reads an attempts header (x-attempts, bq-attempts, bq_attempts) as the broker
// typed it: any Go integer type, a float with no fractional part, or text (a string or
// []byte, read by [ParseAttempts]). It is the one coercion every driver uses, so that a
// value means the same on every broker:
//
//   - A whole number is read as written, a negative one too (the runtime decides what a
//     negative count means: docs/settlement.md), saturating at ±math.MaxInt: a count
//     too large to hold still says the message was tried more often than any
//     max_attempts allows, as the reference SDK, whose integers have no bound, reads it.
//   - Anything else (a fraction, NaN or an infinity, a boolean, text that is not an
//     integer, bytes that are not UTF-8) is no header: it returns 0, false.
func Attempts(v any) (int, bool) {
	switch x := v.(type) {
	case int:
		return max(x, -math.MaxInt), true
	case int8:
		return int(x), true
	case int16:
		return int(x), true
	case int32:
		return int(x), true
	case int64:
		return int(max(min(x, math.MaxInt), -math.MaxInt)), true
	case uint:
		return int(min(x, math.MaxInt)), true
	case uint8:
		return int(x), true
	case uint16:
		return int(x), true
	case uint32:
		return int(min(uint64(x), math.MaxInt)), true
	case uint64:
		return int(min(x, math.MaxInt)), true
	case float32:
		return floatAttempts(float64(x))
	case float64:
		return floatAttempts(x)
	case string:
		return ParseAttempts(x)
	case []byte:
		return ParseAttempts(string(x))
	}
	return 0, false
}

func floatAttempts(f float64) (int, bool) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f):
		return 0, false
	case f >= math.MaxInt: // float64(math.MaxInt) rounds up to 2^63
		return math.MaxInt, true
	case f <= -math.MaxInt:
		return -math.MaxInt, true
	}
	return int(f), true
}

// ParseAttempts reads an attempts header written as text the way the reference SDK
// (Python's int()) reads it: optional ASCII whitespace around an optional sign and
// decimal digits, single underscores allowed between digits ("3", " 4\t", "-1",
// "1_000"), saturating as [Attempts] does. Anything else, and text that is not valid
// UTF-8, is no header: 0, false.
func ParseAttempts(s string) (int, bool) {
	// The common case: a few plain digits.
	if len(s) > 0 && len(s) < 10 {
		n := 0
		for i := 0; i < len(s); i++ {
			ch := s[i]
			if ch < '0' || ch > '9' {
				n = -1
				break
			}
			n = n*10 + int(ch-'0')
		}
		if n >= 0 {
			return n, true
		}
	}
	if !utf8.ValidString(s) {
		return 0, false
	}
	i, j := 0, len(s)
	for i < j && isSpace(s[i]) {
		i++
	}
	for j > i && isSpace(s[j-1]) {
		j--
	}
	s = s[i:j]
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "" || s[0] == '_' || s[len(s)-1] == '_' {
		return 0, false
	}
	n := 0
	prevUnderscore := false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch == '_' {
			if prevUnderscore {
				return 0, false
			}
			prevUnderscore = true
			continue
		}
		prevUnderscore = false
		if ch < '0' || ch > '9' {
			return 0, false
		}
		d := int(ch - '0')
		if n > (math.MaxInt-d)/10 {
			n = math.MaxInt // saturates
		} else {
			n = n*10 + d
		}
	}
	if neg {
		n = -n
	}
	return n, true
}

func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}
