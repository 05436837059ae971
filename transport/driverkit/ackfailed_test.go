package driverkit_test

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// AckFailed tells the Rewind of a delivery whose Ack failed from a plain Rewind.
func TestAckFailed(t *testing.T) {
	l := newLedger(2)
	plain, refused := hand(t, l, "plain"), hand(t, l, "refused")
	if err := settle(l, refused, ack, errBoom); err == nil {
		t.Fatal("the failed Ack returned no error")
	}
	for _, c := range []struct {
		d    any
		want bool
	}{{plain.Handle, false}, {refused.Handle, true}} {
		e := c.d.(*driverkit.Entry[string])
		if got := e.AckFailed(); got != c.want {
			t.Errorf("AckFailed of %s = %v, want %v", e.Value, got, c.want)
		}
	}
	if err := settle(l, refused, rewind, nil); err != nil {
		t.Fatalf("Rewind after the failed Ack: %v", err)
	}
}
