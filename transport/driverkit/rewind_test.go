package driverkit_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// A settle write the broker keeps refusing fails every Ack, and the runtime rewinds each
// delivery after it. The successful Rewind is no recovery: the backoff keeps doubling
// and the failures are logged at each doubling, so the redelivered message cannot spin.
func TestRewindAfterFailedAckKeepsBackingOff(t *testing.T) {
	var logs transporttest.LogBuffer
	l := driverkit.NewLedger[string](driverkit.LedgerConfig{Broker: "test", Queue: "q", Prefetch: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		MinBackoff: time.Millisecond, MaxBackoff: time.Hour})
	for range 8 {
		d := hand(t, l, "a")
		if err := settle(l, d, ack, errBoom); err == nil {
			t.Fatal("Finish swallowed the error")
		}
		if err := settle(l, d, rewind, nil); err != nil {
			t.Fatalf("Rewind: %v", err)
		}
		if err := l.Pause(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	out := logs.String()
	if !strings.Contains(out, "failures=8") || strings.Contains(out, "settling again") {
		t.Fatalf("eight failed Acks each followed by a successful Rewind: want the count to reach 8 and no recovery:\n%s", out)
	}
	if n := strings.Count(out, "settle failed"); n != 4 { // failures 1, 2, 4, 8
		t.Fatalf("logged %d settle-failure lines, want 4:\n%s", n, out)
	}
	// A delivery that settles ends the run of failures.
	d := hand(t, l, "b")
	if err := settle(l, d, ack, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "settling again") {
		t.Fatalf("recovery not logged:\n%s", logs.String())
	}
}
