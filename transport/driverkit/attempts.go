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
//   - A number is clamped to [0, math.MaxInt32]. A count too large to hold still says
//     the message was tried more often than any max_attempts allows, as the reference
//     SDK, whose integers have no bound, reads it (and as the runtime's own counter
//     saturates); a negative count is no attempt made.
//   - Anything else (a fraction, NaN or an infinity, a boolean, text that is not an
//     integer, bytes that are not UTF-8) is no header: it returns 0, false.
func Attempts(v any) (int, bool) {
	switch x := v.(type) {
	case int:
		return clampAttempts(int64(x)), true
	case int8:
		return clampAttempts(int64(x)), true
	case int16:
		return clampAttempts(int64(x)), true
	case int32:
		return clampAttempts(int64(x)), true
	case int64:
		return clampAttempts(x), true
	case uint:
		return clampAttempts(int64(min(uint64(x), math.MaxInt32))), true
	case uint8:
		return int(x), true
	case uint16:
		return int(x), true
	case uint32:
		return clampAttempts(int64(x)), true
	case uint64:
		return clampAttempts(int64(min(x, math.MaxInt32))), true
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
	if math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) {
		return 0, false
	}
	return clampAttempts(int64(max(min(f, math.MaxInt32), -1))), true
}

func clampAttempts(n int64) int { return int(max(min(n, math.MaxInt32), 0)) }

// ParseAttempts reads an attempts header written as text the way the reference SDK
// (Python's int()) reads it: optional ASCII whitespace around an optional sign and
// decimal digits, single underscores allowed between digits ("3", " 4\t", "+2",
// "1_000"), then clamps it as [Attempts] does. Anything else, and text that is not
// valid UTF-8, is no header: 0, false.
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
	var n int64
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
		n = min(n*10+int64(ch-'0'), math.MaxInt32+1) // saturates well within int64
	}
	if neg {
		return 0, true
	}
	return clampAttempts(n), true
}

func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}
