package dlq

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Select is a predicate over a dead-lettered message: the envelope and its
// dead_letter block, through [Entry]. A redrive moves only the messages it selects.
type Select func(*Entry) bool

// All selects the messages every one of sels selects (all of them when sels is
// empty).
func All(sels ...Select) Select {
	return func(e *Entry) bool {
		for _, s := range sels {
			if s != nil && !s(e) {
				return false
			}
		}
		return true
	}
}

// ErrBadSelect matches every error of [ParseSelect].
var ErrBadSelect = errors.New("dlq: bad selection")

// SelectError is the typed form of [ErrBadSelect]: it quotes the clause at fault.
type SelectError struct {
	Clause string
	Reason string
}

// Error describes the fault.
func (e *SelectError) Error() string {
	return fmt.Sprintf("dlq: bad selection %q: %s", e.Clause, e.Reason)
}

// Is makes the error match [ErrBadSelect].
func (e *SelectError) Is(target error) bool { return target == ErrBadSelect }

// selectFields are the fields a clause can test, each read off an entry.
var selectFields = map[string]func(*Entry) string{
	"reason":      (*Entry).Reason,
	"urn":         (*Entry).URN,
	"lang":        (*Entry).Lang,
	"queue":       (*Entry).OriginalQueue,
	"error":       (*Entry).Error,
	"fingerprint": (*Entry).Fingerprint,
	"id":          (*Entry).ID,
	"trace":       (*Entry).TraceID,
	"exception": func(e *Entry) string {
		if e.DeadLetter == nil || e.DeadLetter.Exception == nil {
			return ""
		}
		return *e.DeadLetter.Exception
	},
}

// SelectHelp describes the clauses [ParseSelect] reads, for a command's usage text.
const SelectHelp = `a clause per flag, all of them must hold:
  FIELD=GLOB[|GLOB…]   equal to one of the patterns (* and ? are wildcards)
  FIELD!=GLOB[|GLOB…]  equal to none of them
  FIELD~REGEXP         matches the regular expression (Go syntax; (?i) for any case)
  FIELD!~REGEXP        does not match it
  age>DURATION         dead-lettered longer ago than this (90s, 15m, 2h, 3d)
  age<DURATION         dead-lettered more recently than this
FIELD is reason (failed, unknown_urn, poison), urn, lang (the producing SDK), queue
(the queue it failed on), error (the error text), fingerprint (the error with numbers
and ids masked), exception, id (meta.id) or trace (trace_id).`

// ParseSelect builds the selection that the clauses describe (see [SelectHelp]): each
// clause must hold. now is the time ages are measured from.
func ParseSelect(clauses []string, now time.Time) (Select, error) {
	var sels []Select
	for _, c := range clauses {
		s, err := parseClause(strings.TrimSpace(c), now)
		if err != nil {
			return nil, err
		}
		sels = append(sels, s)
	}
	return All(sels...), nil
}

func parseClause(c string, now time.Time) (Select, error) {
	bad := func(format string, args ...any) (Select, error) {
		return nil, &SelectError{Clause: c, Reason: fmt.Sprintf(format, args...)}
	}
	if rest, ok := strings.CutPrefix(c, "age"); ok && len(rest) > 1 && (rest[0] == '>' || rest[0] == '<') {
		d, err := parseAge(strings.TrimSpace(rest[1:]))
		if err != nil {
			return bad("%v", err)
		}
		cut := now.Add(-d)
		older := rest[0] == '>'
		return func(e *Entry) bool {
			at := e.FailedAt()
			if at.IsZero() {
				return false
			}
			if older {
				return at.Before(cut)
			}
			return at.After(cut)
		}, nil
	}
	i := strings.IndexAny(c, "=~")
	if i <= 0 {
		return bad("want FIELD=GLOB, FIELD~REGEXP, age>DURATION or age<DURATION")
	}
	op := string(c[i])
	field := c[:i]
	if strings.HasSuffix(field, "!") {
		field, op = field[:len(field)-1], "!"+op
	}
	field = strings.ToLower(strings.TrimSpace(field))
	get, ok := selectFields[field]
	if !ok {
		return bad("unknown field %q (want reason, urn, lang, queue, error, fingerprint, exception, id, trace or age)", field)
	}
	value := c[i+1:]
	var match func(string) bool
	switch op[len(op)-1] {
	case '~':
		re, err := regexp.Compile(value)
		if err != nil {
			return bad("%v", err)
		}
		match = re.MatchString
	default:
		var res []*regexp.Regexp
		for _, g := range strings.Split(value, "|") {
			res = append(res, globRegexp(g))
		}
		match = func(s string) bool {
			for _, re := range res {
				if re.MatchString(s) {
					return true
				}
			}
			return false
		}
	}
	if op[0] == '!' {
		return func(e *Entry) bool { return !match(get(e)) }, nil
	}
	return func(e *Entry) bool { return match(get(e)) }, nil
}

// globRegexp compiles a pattern where * is any run of characters and ? any one.
func globRegexp(g string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for _, r := range g {
		switch r {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`)$`)
	return regexp.MustCompile(b.String())
}

// parseAge reads a Go duration, or a whole number of days such as 3d.
func parseAge(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 {
			return 0, fmt.Errorf("%q is not a number of days", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration (want e.g. 90s, 15m, 2h, 3d)", s)
	}
	return d, nil
}
