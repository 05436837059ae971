package driverkit

import (
	"errors"
	"fmt"

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
