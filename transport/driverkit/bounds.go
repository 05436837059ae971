package driverkit

import "time"

// AtLeast records d as a bad value of option when it is below lo: the check every
// driver makes of a duration option ("want a duration above zero" for lo of 1ns, "of
// zero or more" for 0).
func (o *Options) AtLeast(option string, d, lo time.Duration) {
	switch {
	case d >= lo:
	case lo == 0:
		o.Invalid(option, "want a duration of zero or more, got %s", d)
	case lo == 1:
		o.Invalid(option, "want a duration above zero, got %s", d)
	default:
		o.Invalid(option, "want at least %s, got %s", lo, d)
	}
}

// AtLeastN records n as a bad value of option when it is below lo.
func (o *Options) AtLeastN(option string, n, lo int) {
	if n < lo {
		o.Invalid(option, "want at least %d, got %d", lo, n)
	}
}

// SetAtLeast is a duration option's function in one call: it sets *field to d, or
// records d as a bad value of option when it is below lo ([Options.AtLeast]) and leaves
// *field as it was.
func (o *Options) SetAtLeast(option string, field *time.Duration, d, lo time.Duration) {
	if d < lo {
		o.AtLeast(option, d, lo)
		return
	}
	*field = d
}

// SetAtLeastN is [Options.SetAtLeast] for a count.
func (o *Options) SetAtLeastN(option string, field *int, n, lo int) {
	if n < lo {
		o.AtLeastN(option, n, lo)
		return
	}
	*field = n
}
