package driverkit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// A value below its bound is an OptionError naming the option; one at or above it is none.
func TestOptionsBounds(t *testing.T) {
	ok := driverkit.Options{Broker: "b"}
	ok.AtLeast("WithA", 0, 0)
	ok.AtLeast("WithB", time.Nanosecond, 1)
	ok.AtLeast("WithC", time.Second, time.Second)
	ok.AtLeastN("WithD", 1, 1)
	if err := ok.Err(); err != nil {
		t.Fatalf("values within their bounds: %v", err)
	}
	for _, tc := range []struct {
		option, reason string
		check          func(*driverkit.Options)
	}{
		{"WithA", "want a duration of zero or more, got -1ns", func(o *driverkit.Options) { o.AtLeast("WithA", -1, 0) }},
		{"WithB", "want a duration above zero, got 0s", func(o *driverkit.Options) { o.AtLeast("WithB", 0, 1) }},
		{"WithC", "want at least 1s, got 999ms", func(o *driverkit.Options) { o.AtLeast("WithC", 999*time.Millisecond, time.Second) }},
		{"WithD", "want at least 1, got 0", func(o *driverkit.Options) { o.AtLeastN("WithD", 0, 1) }},
	} {
		o := driverkit.Options{Broker: "b"}
		tc.check(&o)
		var oe *driverkit.OptionError
		if err := o.Err(); !errors.As(err, &oe) || !errors.Is(err, transport.ErrInvalidOption) || oe.Option != tc.option || oe.Reason != tc.reason {
			t.Errorf("%s: %v, want an OptionError naming it: %q", tc.option, err, tc.reason)
		}
	}
}

// SetAtLeast and SetAtLeastN set a value within its bound and keep the field, recording
// the option, for one below it.
func TestOptionsSetAtLeast(t *testing.T) {
	o := driverkit.Options{Broker: "b"}
	d, n := time.Second, 4
	o.SetAtLeast("WithWait", &d, 0, 0)
	o.SetAtLeastN("WithBatch", &n, 8, 1)
	if err := o.Err(); err != nil || d != 0 || n != 8 {
		t.Fatalf("values within their bounds: %v, %s, %d; want nil, 0s, 8", err, d, n)
	}
	o.SetAtLeast("WithTimeout", &d, -time.Second, 1)
	o.SetAtLeastN("WithBatch", &n, 0, 1)
	var oe *driverkit.OptionError
	if err := o.Err(); !errors.As(err, &oe) || oe.Option != "WithTimeout" || oe.Reason != "want a duration above zero, got -1s" ||
		!strings.Contains(err.Error(), "invalid option WithBatch: want at least 1, got 0") {
		t.Errorf("values below their bounds: %v", err)
	}
	if d != 0 || n != 8 {
		t.Errorf("a bad value changed the field: %s, %d; want 0s, 8", d, n)
	}
}
