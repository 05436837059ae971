package driverkit

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// OptionError is a bad value of a driver's option, given in code
// (amqp.WithConfirmTimeout(-1)) or in the driver's URL (?confirm_timeout=soon): a
// value is never silently ignored. It names the option and matches
// [transport.ErrInvalidOption] (babelqueue.ErrInvalidOption is the same error). One
// read from a URL also matches [transport.ErrBadURL], and errors.As finds its
// [*transport.BadURLError].
type OptionError struct {
	Broker string // the driver: "amqp"
	Option string // the option: its function ("WithConfirmTimeout") or URL parameter ("confirm_timeout")
	Reason string // what is wrong with the value
	// URL is the error's URL form when the option came from a URL, else nil.
	URL *transport.BadURLError
}

// Error names the driver, the option and what is wrong; a URL option's says it as a
// bad URL does.
func (e *OptionError) Error() string {
	if e.URL != nil {
		return e.URL.Error()
	}
	return fmt.Sprintf("%s: invalid option %s: %s", e.Broker, e.Option, e.Reason)
}

// Is makes the error match [transport.ErrInvalidOption].
func (e *OptionError) Is(target error) bool { return target == transport.ErrInvalidOption }

// Unwrap returns the URL form, when the option came from a URL.
func (e *OptionError) Unwrap() error {
	if e.URL == nil {
		return nil
	}
	return e.URL
}

// Options collects the bad values given to a driver's option functions, for its
// constructor to return: an option function that gets a value it cannot use records
// it with Invalid (rather than ignoring it), and the driver's Dial or New returns
// Err. The zero value is ready; set Broker to name the driver.
type Options struct {
	Broker string
	errs   []error
}

// Invalid records a bad value of option (the option function's name), with the reason
// formatted from format and args.
func (o *Options) Invalid(option, format string, args ...any) {
	o.errs = append(o.errs, &OptionError{Broker: o.Broker, Option: option, Reason: fmt.Sprintf(format, args...)})
}

// Err returns nil when every value was good, else an error joining an [*OptionError]
// per bad value.
func (o *Options) Err() error { return errors.Join(o.errs...) }

// Query reads the query parameters of a driver's URL in the grammar of
// [transport.Query] (the grammar every driver shares: durations, booleans, bounded
// integers). A parameter the driver does not know, one given twice and a value that
// does not parse or is out of its bounds are each an [*OptionError] naming the
// parameter, matching [transport.ErrInvalidOption] and [transport.ErrBadURL].
type Query struct {
	broker string
	scheme string
	q      transport.Query
}

// ParseQuery reads u's query for the driver broker. When known is not empty, a
// parameter not in it is an error.
func ParseQuery(broker string, u *url.URL, known ...string) (Query, error) {
	q := Query{broker: broker, scheme: u.Scheme}
	if len(known) > 0 {
		if err := transport.CheckParams(u, known...); err != nil {
			return q, q.wrap(err)
		}
	}
	tq, err := transport.ParseQuery(u)
	q.q = tq
	return q, q.wrap(err)
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
func (q Query) Has(name string) bool { return q.q.Has(name) }

// String returns the parameter's value as given.
func (q Query) String(name string) (string, bool) { return q.q.String(name) }

// NonEmpty returns the parameter's value, refusing an empty one.
func (q Query) NonEmpty(name string) (string, bool, error) {
	v, ok, err := q.q.NonEmpty(name)
	return v, ok, q.wrap(err)
}

// Bool returns a boolean parameter.
func (q Query) Bool(name string) (bool, bool, error) {
	v, ok, err := q.q.Bool(name)
	return v, ok, q.wrap(err)
}

// Int returns an integer parameter within [lo, hi].
func (q Query) Int(name string, lo, hi int) (int, bool, error) {
	v, ok, err := q.q.Int(name, lo, hi)
	return v, ok, q.wrap(err)
}

// Duration returns a duration parameter within [lo, hi] (hi of zero or less: no upper
// bound); a bare number is in unit.
func (q Query) Duration(name string, unit, lo, hi time.Duration) (time.Duration, bool, error) {
	v, ok, err := q.q.Duration(name, unit, lo, hi)
	return v, ok, q.wrap(err)
}

// TLS reads the TLS parameters every scheme shares ([transport.TLSParams]) from u, as
// [transport.ParseTLS] does, with a bad value an [*OptionError] naming it. secure says
// whether the URL asks for TLS (its scheme, or a parameter of the driver's); aliases
// maps a driver's own parameter names to the shared ones.
func (q Query) TLS(u *url.URL, secure bool, aliases map[string]string) (*tls.Config, error) {
	c, err := transport.ParseTLS(u, secure, aliases)
	return c, q.wrap(err)
}
