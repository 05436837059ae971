package driverkit

import "errors"

// Unsent marks err, the failure of a write, as one that cannot have reached the broker
// (the connection was lost, or could not be made, before the write went out), so that
// [RideOut] makes the write again: pass [IsUnsent] as its unsent function. The error
// keeps err's text and wraps it. Unsent(nil) is nil.
func Unsent(err error) error {
	if err == nil {
		return nil
	}
	return unsentError{err}
}

// IsUnsent reports whether err, or an error it wraps, was marked with [Unsent].
func IsUnsent(err error) bool { return err != nil && errors.As(err, new(unsentError)) }

type unsentError struct{ err error }

func (e unsentError) Error() string { return e.err.Error() }
func (e unsentError) Unwrap() error { return e.err }
