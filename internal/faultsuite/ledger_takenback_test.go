package faultsuite

import (
	"slices"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// A delivery the killed worker settled itself, whose event arrived after the kill, is
// not a stalled orphan; one nobody settled is left unsettled.
func TestTakenBackCountsTheVictimsOwnSettlement(t *testing.T) {
	kill := time.Now()
	l := &Ledger{settles: []settlement{
		{id: "a", worker: 3, at: kill.Add(10 * time.Millisecond)},
		{id: "b", worker: 1, at: kill.Add(2 * time.Second)},
	}}
	at, unsettled := l.TakenBack(3, []string{"a", "b"}, kill)
	if len(unsettled) > 0 || !at.Equal(kill.Add(2*time.Second)) {
		t.Errorf("TakenBack = %v, %v unsettled; want the other worker's settlement of b and none", at, unsettled)
	}
	if _, unsettled := l.TakenBack(3, []string{"a", "c"}, kill); !slices.Equal(unsettled, []string{"c"}) {
		t.Errorf("TakenBack left %v unsettled, want [c]: it was never settled", unsettled)
	}
}

// Finished tells an orphan whose handler returned in the killed worker (the runtime
// was settling it) from one it was still handling.
func TestFinishedIsPerWorkerAndPerMessage(t *testing.T) {
	l := NewLedger("q")
	l.Published("a", 0, false)
	l.Published("b", 1, true)
	l.Published("c", 2, false)
	l.Apply(Event{Ev: EvHandled, Worker: 2, ID: "a"})
	l.Apply(Event{Ev: EvTried, Worker: 2, ID: "b"})
	l.Apply(Event{Ev: EvHandled, Worker: 1, ID: "c"})
	if !l.Finished(2, []string{"a", "b"}) {
		t.Error("Finished(2, [a b]) = false; worker 2 handled a and tried b")
	}
	if l.Finished(2, []string{"a", "c"}) {
		t.Error("Finished(2, [a c]) = true; c was handled by worker 1, not 2")
	}
}

// Only a queue left with nothing in it proves that an orphan nobody settled was
// settled by the killed worker; a count the broker cannot tell counts as none.
func TestResidueEmpty(t *testing.T) {
	for _, tc := range []struct {
		ready, inFlight, delayed int64
		want                     bool
	}{
		{0, 0, 0, true},
		{0, -1, -1, true}, // RabbitMQ, Kafka, a browsed Artemis
		{1, 0, 0, false},
		{0, 1, 0, false}, // held for a consumer that is gone
		{0, 0, 1, false},
	} {
		st := transportStats(tc.ready, tc.inFlight, tc.delayed)
		if got := residueEmpty(st); got != tc.want {
			t.Errorf("residueEmpty(%+v) = %v, want %v", st, got, tc.want)
		}
	}
}

func transportStats(ready, inFlight, delayed int64) transport.QueueStats {
	return transport.QueueStats{Exists: true, Ready: ready, InFlight: inFlight, Delayed: delayed}
}
