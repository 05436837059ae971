package transport

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Query reads the query parameters of a broker URL with one grammar for every driver.
// Each accessor returns the value, whether the parameter was given, and a [*BadURLError]
// naming the parameter when its value is invalid: a bad value is never ignored.
//
// The grammar:
//
//   - Duration: a Go duration ("1500ms", "30s", "1m30s") or a bare decimal number
//     ("60", "0.5") in the unit the parameter documents (seconds for most, milliseconds
//     where a broker's own URI scheme says so). Negative values, NaN and values too
//     large for a time.Duration are refused; each parameter also has its own bounds.
//   - Bool: 1, t, true, yes, on / 0, f, false, no, off, in any case.
//   - Int: a decimal integer within the parameter's bounds.
//   - String: any value; [Query.NonEmpty] refuses the empty string.
type Query struct {
	scheme string
	values url.Values
}

// ParseQuery reads u's query. A parameter given more than once is an error naming it.
func ParseQuery(u *url.URL) (Query, error) {
	q := Query{scheme: strings.ToLower(u.Scheme), values: u.Query()}
	for k, vs := range q.values {
		if len(vs) > 1 {
			return q, q.bad(k, "given more than once")
		}
	}
	return q, nil
}

func (q Query) bad(param, reason string) error {
	return &BadURLError{Scheme: q.scheme, Param: param, Reason: reason}
}

// Has reports whether the parameter was given.
func (q Query) Has(name string) bool { return q.values.Has(name) }

// String returns the parameter's value as given.
func (q Query) String(name string) (string, bool) {
	if !q.values.Has(name) {
		return "", false
	}
	return q.values.Get(name), true
}

// NonEmpty returns the parameter's value, refusing an empty one.
func (q Query) NonEmpty(name string) (string, bool, error) {
	v, ok := q.String(name)
	if ok && strings.TrimSpace(v) == "" {
		return "", true, q.bad(name, "empty")
	}
	return v, ok, nil
}

// Bool returns a boolean parameter (see [Query] for the grammar).
func (q Query) Bool(name string) (bool, bool, error) {
	v, ok := q.String(name)
	if !ok {
		return false, false, nil
	}
	b, err := ParseBool(v)
	if err != nil {
		return false, true, q.bad(name, err.Error())
	}
	return b, true, nil
}

// Int returns an integer parameter within [lo, hi].
func (q Query) Int(name string, lo, hi int) (int, bool, error) {
	v, ok := q.String(name)
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < lo || n > hi {
		return 0, true, q.bad(name, fmt.Sprintf("want a whole number from %d to %d, got %q", lo, hi, v))
	}
	return n, true, nil
}

// Duration returns a duration parameter within [lo, hi] (see [Query] for the grammar);
// a bare number is in unit. A hi of zero or less is no upper bound.
func (q Query) Duration(name string, unit, lo, hi time.Duration) (time.Duration, bool, error) {
	v, ok := q.String(name)
	if !ok {
		return 0, false, nil
	}
	d, err := ParseDuration(v, unit)
	if err == nil && (d < lo || (hi > 0 && d > hi)) {
		err = fmt.Errorf("%q is out of range", v)
	}
	if err != nil {
		want := fmt.Sprintf("want a duration such as 1500ms or 30s, or a number of %s", unitName(unit))
		switch {
		case hi > 0:
			want += fmt.Sprintf(", from %s to %s", lo, hi)
		case lo > 0:
			want += fmt.Sprintf(", at least %s", lo)
		}
		return 0, true, q.bad(name, fmt.Sprintf("%s; got %q", want, v))
	}
	return d, true, nil
}

func unitName(unit time.Duration) string {
	switch unit {
	case time.Millisecond:
		return "milliseconds"
	case time.Second:
		return "seconds"
	case time.Minute:
		return "minutes"
	}
	return "units of " + unit.String()
}

// ParseDuration reads a duration in the grammar of [Query]: a Go duration, or a bare
// non-negative decimal number in unit.
func ParseDuration(v string, unit time.Duration) (time.Duration, error) {
	s := strings.TrimSpace(v)
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			return 0, fmt.Errorf("%q is not a non-negative number", v)
		}
		d := f * float64(unit)
		if d >= math.MaxInt64 {
			return 0, fmt.Errorf("%q is too long", v)
		}
		return time.Duration(d), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration", v)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", v)
	}
	return d, nil
}

// ParseBool reads a boolean in the grammar of [Query].
func ParseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "t", "true", "yes", "on":
		return true, nil
	case "0", "f", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("want 1 or 0 (true/false, yes/no, on/off), got %q", v)
}
