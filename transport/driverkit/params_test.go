package driverkit_test

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

var testParams = driverkit.Params[string]{
	{Name: "timeout", Duration: func(d time.Duration) string { return "timeout=" + d.String() }, Lo: time.Millisecond, Hi: time.Hour},
	{Name: "confirm", Bool: func(b bool) string { return fmt.Sprint("confirm=", b) }},
	{Name: "batch", Int: func(n int) string { return fmt.Sprint("batch=", n) }, Min: 1, Max: 100},
	{Name: "group", String: func(s string) string { return "group=" + s }, Check: func(s string) string {
		if s == "bad" {
			return "want a good group"
		}
		return ""
	}},
	{Name: "linger", Duration: func(d time.Duration) string { return "linger=" + d.String() }, Unit: time.Millisecond},
}

// Read gives the options of the parameters present, in the table's order, and the
// OptionError naming a parameter whose value is bad.
func TestParamsRead(t *testing.T) {
	read := func(query string) ([]string, error) {
		u, _ := url.Parse("x://h/?" + query)
		q, err := driverkit.ParseQuery("x", u, testParams.Names()...)
		if err != nil {
			return nil, err
		}
		return testParams.Read(q)
	}
	got, err := read("linger=5&group=g&batch=7&confirm=off&timeout=2.5")
	if want := []string{"timeout=2.5s", "confirm=false", "batch=7", "group=g", "linger=5ms"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("Read = %v, %v; want %v", got, err, want)
	}
	if got, err := read(""); err != nil || len(got) != 0 {
		t.Fatalf("no parameters: %v, %v", got, err)
	}
	for _, bad := range []string{"timeout=soon", "timeout=2h", "confirm=maybe", "batch=0", "batch=x", "group=", "group=bad", "linger=-1", "other=1"} {
		_, err := read(bad)
		var oe *driverkit.OptionError
		name := bad[:len(bad)-len(bad[slices.Index([]byte(bad), '='):])]
		if !errors.As(err, &oe) || !errors.Is(err, transport.ErrInvalidOption) || !errors.Is(err, transport.ErrBadURL) || oe.Option != name {
			t.Errorf("%s: %v, want an OptionError naming %s", bad, err, name)
		}
	}
}

// Into: a table of Params[func()] fills a struct; nothing is stored before the options
// are applied, and a parameter not given leaves its field alone.
func TestParamsInto(t *testing.T) {
	var c struct {
		wait  time.Duration
		name  string
		on    bool
		count int
	}
	c.count = 7
	u, _ := url.Parse("x://h/?wait=2&name=n&on=1")
	q, err := driverkit.ParseQuery("x", u)
	if err != nil {
		t.Fatal(err)
	}
	sets, err := driverkit.Params[func()]{
		{Name: "wait", Duration: driverkit.Into(&c.wait)},
		{Name: "name", String: driverkit.Into(&c.name)},
		{Name: "on", Bool: driverkit.Into(&c.on)},
		{Name: "count", Int: driverkit.Into(&c.count), Min: 1, Max: 9},
	}.Read(q)
	if err != nil || len(sets) != 3 || c.name != "" {
		t.Fatalf("Read = %d options, %v; name %q before they are applied", len(sets), err, c.name)
	}
	for _, set := range sets {
		set()
	}
	if c.wait != 2*time.Second || c.name != "n" || !c.on || c.count != 7 {
		t.Fatalf("filled %+v", c)
	}
}
