package faultsuite

import (
	"testing"
	"time"
)

// A delivery the killed worker settled itself, whose event arrived after the kill, is
// not a stalled orphan; one nobody settled is.
func TestTakenBackCountsTheVictimsOwnSettlement(t *testing.T) {
	kill := time.Now()
	l := &Ledger{settles: []settlement{
		{id: "a", worker: 3, at: kill.Add(10 * time.Millisecond)},
		{id: "b", worker: 1, at: kill.Add(2 * time.Second)},
	}}
	at, ok := l.TakenBack(3, []string{"a", "b"}, kill)
	if !ok || !at.Equal(kill.Add(2*time.Second)) {
		t.Errorf("TakenBack = %v, %v; want the other worker's settlement of b", at, ok)
	}
	if _, ok := l.TakenBack(3, []string{"a", "c"}, kill); ok {
		t.Error("c was never settled, yet TakenBack reported it taken back")
	}
}
