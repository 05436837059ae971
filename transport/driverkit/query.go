package driverkit

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Query reads the query parameters of a driver's URL with the one grammar every driver
// shares. A parameter the driver does not know, one given twice and a value that does
// not parse or is out of its bounds are each an [*OptionError] naming the parameter,
// matching [transport.ErrInvalidOption] and [transport.ErrBadURL]: a bad value is never
// ignored.
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
	broker string
	scheme string
	values url.Values
}

// ParseQuery reads u's query for the driver broker. When known is not empty, a
// parameter not in it is an error. A parameter given more than once is an error.
func ParseQuery(broker string, u *url.URL, known ...string) (Query, error) {
	q := Query{broker: broker, scheme: strings.ToLower(u.Scheme), values: u.Query()}
	if len(known) > 0 {
		if err := transport.CheckParams(u, known...); err != nil {
			return q, q.wrap(err)
		}
	}
	for k, vs := range q.values {
		if len(vs) > 1 {
			return q, q.Bad(k, "given more than once")
		}
	}
	return q, nil
}

// Bad returns the [*OptionError] of param with reason, for a check of the driver's
// own (a value that must go with another).
func (q Query) Bad(param, reason string) error {
	return q.wrap(&transport.BadURLError{Scheme: q.scheme, Param: param, Reason: reason})
}

// wrap makes a *transport.BadURLError naming a parameter an *OptionError.
func (q Query) wrap(err error) error {
	var bad *transport.BadURLError
	if err == nil || !errors.As(err, &bad) {
		return err
	}
	return &OptionError{Broker: q.broker, Option: bad.Param, Reason: bad.Reason, URL: bad}
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
		return "", true, q.Bad(name, "empty")
	}
	return v, ok, nil
}

// Bool returns a boolean parameter (see [Query] for the grammar).
func (q Query) Bool(name string) (bool, bool, error) {
	v, ok := q.String(name)
	if !ok {
		return false, false, nil
	}
	b, err := parseBool(v)
	if err != nil {
		return false, true, q.Bad(name, err.Error())
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
		return 0, true, q.Bad(name, fmt.Sprintf("want a whole number from %d to %d, got %q", lo, hi, v))
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
	d, err := parseDuration(v, unit)
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
		return 0, true, q.Bad(name, fmt.Sprintf("%s; got %q", want, v))
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

// parseDuration reads a duration in the grammar of [Query]: a Go duration, or a bare
// non-negative decimal number in unit.
func parseDuration(v string, unit time.Duration) (time.Duration, error) {
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

// parseBool reads a boolean in the grammar of [Query].
func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "t", "true", "yes", "on":
		return true, nil
	case "0", "f", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("want 1 or 0 (true/false, yes/no, on/off), got %q", v)
}

// TLS reads the TLS parameters every scheme shares ([transport.TLSParams]) and returns
// the client configuration, or nil when secure is false and the URL has none. secure
// says the URL asks for TLS (a secure scheme, or tls=1 on kafka://); a TLS parameter on
// a URL that does not is an error naming it, as is any invalid value, each an
// [*OptionError]. aliases maps a scheme's own older parameter names to the shared ones
// (RabbitMQ's cacertfile to tls_ca, …): a name and its alias given together are an
// error.
func (q Query) TLS(secure bool, aliases map[string]string) (*tls.Config, error) {
	vals := map[string]string{}
	given := map[string]string{} // shared name -> the name the URL used
	for _, name := range transport.TLSParams {
		if v, ok := q.String(name); ok {
			vals[name], given[name] = v, name
		}
	}
	for alias, name := range aliases {
		v, ok := q.String(alias)
		if !ok {
			continue
		}
		if prev, dup := given[name]; dup {
			return nil, q.Bad(alias, "the same parameter as "+prev+": give one of them")
		}
		vals[name], given[name] = v, alias
	}
	if !secure {
		for _, name := range transport.TLSParams {
			if p, ok := given[name]; ok {
				return nil, q.Bad(p, "a TLS parameter on a URL without TLS (use the secure scheme, or tls=1 on kafka://)")
			}
		}
		return nil, nil
	}
	var o transport.TLSOptions
	for name, into := range map[string]*string{
		transport.ParamTLSCA: &o.CAFile, transport.ParamTLSCert: &o.CertFile, transport.ParamTLSKey: &o.KeyFile, transport.ParamTLSServerName: &o.ServerName,
	} {
		if p, ok := given[name]; ok {
			if strings.TrimSpace(vals[name]) == "" {
				return nil, q.Bad(p, "empty")
			}
			*into = vals[name]
		}
	}
	if p, ok := given[transport.ParamTLSInsecure]; ok {
		var err error
		if o.Insecure, err = parseBool(vals[transport.ParamTLSInsecure]); err != nil {
			return nil, q.Bad(p, err.Error())
		}
	}
	c, err := o.Config()
	if err != nil {
		var b *transport.BadURLError
		if errors.As(err, &b) {
			b.Scheme = q.scheme
			if p, ok := given[b.Param]; ok {
				b.Param = p
			}
		}
		return nil, q.wrap(err)
	}
	return c, nil
}
