package driverkit_test

import (
	"strings"
	"testing"
)

// Unsettled lists the open entries and those being settled, oldest first, and drops
// them once settled or given back.
func TestUnsettledIncludesSettling(t *testing.T) {
	l := newLedger(4)
	a := hand(t, l, "p0-a")
	b := hand(t, l, "p1-b")
	hand(t, l, "p0-c")
	d := hand(t, l, "p0-d")
	e, err := l.Begin(b, ack)
	if err != nil {
		t.Fatal(err)
	}
	if err := settle(l, a, ack, nil); err != nil {
		t.Fatal(err)
	}
	values := func(keep func(string) bool) string {
		var vs []string
		for _, e := range l.Unsettled(keep) {
			vs = append(vs, e.Value)
		}
		return strings.Join(vs, ",")
	}
	if got := values(nil); got != "p1-b,p0-c,p0-d" {
		t.Fatalf("Unsettled(nil) = %s, want the settling p1-b and the open p0-c, p0-d", got)
	}
	if got := values(func(v string) bool { return strings.HasPrefix(v, "p0") }); got != "p0-c,p0-d" {
		t.Fatalf("Unsettled(p0) = %s", got)
	}
	if err := l.Finish(e, ack, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Begin(d, rewind); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if got := values(nil); got != "p0-d" {
		t.Fatalf("after Close, Unsettled = %s, want only the settle still in progress", got)
	}
}
