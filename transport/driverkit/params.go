package driverkit

import (
	"cmp"
	"time"
)

// Param binds one URL query parameter to the driver option that takes its value, so a
// driver declares its parameters as a table and reads them with [Params.Read] instead of
// a loop per kind. Exactly one of Duration, Bool, Int and String is set.
type Param[O any] struct {
	Name string // the query parameter: "delivery_timeout"
	// Duration takes a duration within [Lo, Hi] (Hi of zero: no upper bound); a bare
	// number is in Unit (seconds when Unit is zero).
	Duration     func(time.Duration) O
	Lo, Hi, Unit time.Duration
	// Bool takes a boolean (1/0, true/false, yes/no, on/off).
	Bool func(bool) O
	// Int takes an integer within [Min, Max].
	Int      func(int) O
	Min, Max int
	// String takes a value that must not be empty, nor one Check (when set) says why
	// it cannot be used: Check returns the reason, or "" for a good value.
	String func(string) O
	Check  func(string) string
}

// Params are a driver's URL parameters.
type Params[O any] []Param[O]

// Names returns the parameters' names, for [ParseQuery]'s known list.
func (ps Params[O]) Names() []string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return names
}

// Read returns the options of the parameters q holds, in the table's order. A value that
// does not parse or is out of bounds is the *OptionError naming the parameter.
func (ps Params[O]) Read(q Query) ([]O, error) {
	var opts []O
	for _, p := range ps {
		var o O
		var ok bool
		var err error
		switch {
		case p.Duration != nil:
			var d time.Duration
			if d, ok, err = q.Duration(p.Name, cmp.Or(p.Unit, time.Second), p.Lo, p.Hi); ok {
				o = p.Duration(d)
			}
		case p.Bool != nil:
			var b bool
			if b, ok, err = q.Bool(p.Name); ok {
				o = p.Bool(b)
			}
		case p.Int != nil:
			var n int
			if n, ok, err = q.Int(p.Name, p.Min, p.Max); ok {
				o = p.Int(n)
			}
		case p.String != nil:
			var s string
			if s, ok, err = q.NonEmpty(p.Name); ok && err == nil && p.Check != nil && p.Check(s) != "" {
				err = q.Bad(p.Name, p.Check(s))
			} else if ok {
				o = p.String(s)
			}
		}
		if err != nil {
			return nil, err
		}
		if ok {
			opts = append(opts, o)
		}
	}
	return opts, nil
}

// Into is the option function of a Params[func()] row that stores the value read in *p:
// a parser that fills a struct reads its parameters with one table, then applies the
// options [Params.Read] returned.
func Into[T any](p *T) func(T) func() {
	return func(v T) func() { return func() { *p = v } }
}
