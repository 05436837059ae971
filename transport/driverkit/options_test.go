package driverkit_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// TestQueryErrorsAreInvalidOptions: a URL option the driver does not know, one given
// twice and each bad value is an OptionError naming the parameter, matching
// ErrInvalidOption and ErrBadURL, with the BadURLError reachable by errors.As.
func TestQueryErrorsAreInvalidOptions(t *testing.T) {
	known := []string{"wait", "on", "n", "name"}
	for _, tc := range []struct {
		query string
		param string
		read  func(driverkit.Query) error
	}{
		{"bogus=1", "bogus", nil},
		{"n=1&n=2", "n", nil},
		{"wait=soon", "wait", func(q driverkit.Query) error {
			_, _, err := q.Duration("wait", time.Second, 0, time.Minute)
			return err
		}},
		{"wait=2h", "wait", func(q driverkit.Query) error {
			_, _, err := q.Duration("wait", time.Second, 0, time.Minute)
			return err
		}},
		{"on=perhaps", "on", func(q driverkit.Query) error { _, _, err := q.Bool("on"); return err }},
		{"n=70000", "n", func(q driverkit.Query) error { _, _, err := q.Int("n", 0, 65535); return err }},
		{"name=", "name", func(q driverkit.Query) error { _, _, err := q.NonEmpty("name"); return err }},
		{"name=x", "name", func(q driverkit.Query) error { return q.Bad("name", "goes with n") }},
	} {
		t.Run(tc.query, func(t *testing.T) {
			u, _ := url.Parse("fake://u:s3cret@host/?" + tc.query)
			q, err := driverkit.ParseQuery("fake", u, known...)
			if err == nil && tc.read != nil {
				err = tc.read(q)
			}
			var oe *driverkit.OptionError
			var bad *transport.BadURLError
			switch {
			case !errors.As(err, &oe) || oe.Option != tc.param || oe.Broker != "fake":
				t.Errorf("error %v: want an OptionError naming %q", err, tc.param)
			case !errors.Is(err, transport.ErrInvalidOption) || !errors.Is(err, transport.ErrBadURL):
				t.Errorf("error %v matches ErrInvalidOption %v, ErrBadURL %v; want both", err,
					errors.Is(err, transport.ErrInvalidOption), errors.Is(err, transport.ErrBadURL))
			case !errors.As(err, &bad) || bad.Param != tc.param:
				t.Errorf("error %v: want its BadURLError naming %q", err, tc.param)
			case strings.Contains(err.Error(), "s3cret"):
				t.Errorf("error echoes the password: %v", err)
			}
		})
	}
	u, _ := url.Parse("fake://host/?wait=1500ms&on=yes&n=7&name=x")
	q, err := driverkit.ParseQuery("fake", u, known...)
	if err != nil {
		t.Fatal(err)
	}
	d, _, err1 := q.Duration("wait", time.Second, 0, 0)
	on, _, err2 := q.Bool("on")
	n, _, err3 := q.Int("n", 0, 10)
	name, ok := q.String("name")
	if d != 1500*time.Millisecond || !on || n != 7 || name != "x" || !ok || errors.Join(err1, err2, err3) != nil || !q.Has("n") || q.Has("other") {
		t.Errorf("good values read as %s %v %d %q %v (%v %v %v)", d, on, n, name, ok, err1, err2, err3)
	}
}

// TestOptionsCollectBadValues: a driver's option functions record the values they
// cannot use, and the constructor returns them all, each naming its option.
func TestOptionsCollectBadValues(t *testing.T) {
	o := driverkit.Options{Broker: "fake"}
	if err := o.Err(); err != nil {
		t.Fatalf("no bad value: Err = %v", err)
	}
	o.Invalid("WithConfirmTimeout", "want more than zero, got %s", time.Duration(-1))
	o.Invalid("WithMaxMessageSize", "want more than zero, got %d", 0)
	err := o.Err()
	if !errors.Is(err, transport.ErrInvalidOption) || errors.Is(err, transport.ErrBadURL) {
		t.Fatalf("Err = %v: want ErrInvalidOption (and not ErrBadURL: given in code)", err)
	}
	for _, want := range []string{"fake: invalid option WithConfirmTimeout: want more than zero, got -1ns", "WithMaxMessageSize"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Err = %q, want it to say %q", err, want)
		}
	}
}
