package faultsuite

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// deadLetterBody is a dead letter as the runtime writes it.
func deadLetterBody(id, queue, reason string, n int) []byte {
	return fmt.Appendf(nil, `{"job":%q,"trace_id":"t","data":{"n":%d},"meta":{"id":%q,"queue":%q,"lang":"go","schema_version":1,"created_at":1},`+
		`"attempts":3,"dead_letter":{"reason":%q,"error":"refused %d","exception":null,"failed_at":1,"original_queue":%q,"attempts":3,"lang":"go"}}`,
		URNFail, n, id, queue, reason, n, queue)
}

func at(sec float64) int64 {
	return time.Unix(1000, 0).Add(time.Duration(sec * float64(time.Second))).UnixNano()
}

func TestLedgerAccountsForEveryID(t *testing.T) {
	l := NewLedger("q")
	l.Published("g0", 0, false)
	l.Published("g1", 1, false)
	l.Published("g2", 2, false)
	l.Published("f3", 3, true)
	l.Published("f4", 4, true)
	l.Apply(Event{Ev: EvHandled, ID: "g0"})
	l.Apply(Event{Ev: EvHandled, ID: "g1"})
	l.Apply(Event{Ev: EvHandled, ID: "g1"}) // a duplicate
	l.DeadLetter(deadLetterBody("f3", "q", "failed", 3))
	l.DeadLetter(deadLetterBody("f3", "q", "failed", 3)) // a duplicate
	if l.Complete() {
		t.Fatal("Complete with g2 never handled and f4 never dead-lettered")
	}
	c := l.Counts()
	want := Counts{Published: 5, Failing: 2, Handled: 2, DeadLettered: 1, Missing: 2, Duplicates: 2, FailedSettles: map[string]int{}}
	if fmt.Sprint(c) != fmt.Sprint(want) {
		t.Errorf("Counts = %+v, want %+v", c, want)
	}
	if got := l.MissingNumbers(10); !slices.Equal(got, []int{2, 4}) {
		t.Errorf("MissingNumbers = %v, want [2 4]", got)
	}
	l.Apply(Event{Ev: EvHandled, ID: "g2"})
	l.DeadLetter(deadLetterBody("f4", "q", "failed", 4))
	if !l.Complete() {
		t.Error("not Complete after every id was accounted for")
	}
	if p := l.Problems(); len(p) != 0 {
		t.Errorf("Problems = %q, want none", p)
	}
}

func TestLedgerProblems(t *testing.T) {
	l := NewLedger("q")
	l.Published("g0", 0, false)
	l.Published("f1", 1, true)
	l.Published("f2", 2, true)
	l.DeadLetter(deadLetterBody("g0", "q", "failed", 0))      // a good message dead-lettered
	l.DeadLetter(deadLetterBody("f1", "q", "unknown_urn", 1)) // the wrong reason
	l.DeadLetter(deadLetterBody("f2", "other", "failed", 2))  // the wrong queue
	l.DeadLetter(deadLetterBody("nobody", "q", "failed", 9))  // never published
	l.Apply(Event{Ev: EvHandled, ID: "f1"})                   // a failing message handled
	l.Apply(Event{Ev: EvSettled, ID: "x", Kind: "poison"})    // poison
	l.DeadLetter([]byte("not json"))                          // not an envelope
	problems := strings.Join(l.Problems(), "\n")
	for _, want := range []string{
		"good message 0 was dead-lettered", `failing message 1 dead-lettered with reason "unknown_urn"`,
		`failing message 2 dead-lettered with reason "failed" from "other"`, "1 meta.ids seen that the run never published",
		"failing message 1 was handled", "a delivery settled as poison", "a dead letter is not an envelope",
	} {
		if !strings.Contains(problems, want) {
			t.Errorf("Problems lack %q:\n%s", want, problems)
		}
	}
	if c := l.Counts(); c.DeadLettered != 0 || c.Missing != 3 {
		t.Errorf("Counts = %+v, want nothing dead-lettered properly and 3 missing", c)
	}
}

func TestLedgerRecoveryMeasures(t *testing.T) {
	l := NewLedger("q")
	for i, id := range []string{"a", "b", "c"} {
		l.Published(id, i, i == 2)
	}
	// Worker 0 takes a and b and is killed; worker 1 settles them later.
	l.Apply(Event{Ev: EvReceived, Worker: 0, ID: "a", At: at(0)})
	l.Apply(Event{Ev: EvReceived, Worker: 0, ID: "b", At: at(0)})
	if got := l.InFlight(0); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("InFlight(0) = %v, want [a b]", got)
	}
	l.Apply(Event{Ev: EvSettled, Worker: 1, ID: "a", Action: "ack", At: at(5)})
	if _, unsettled := l.TakenBack(0, []string{"a", "b"}, time.Unix(0, at(1))); !slices.Equal(unsettled, []string{"b"}) {
		t.Errorf("TakenBack left %v unsettled, want [b] (never settled by another worker)", unsettled)
	}
	l.Apply(Event{Ev: EvSettled, Worker: 1, ID: "b", Action: "ack", Err: "refused", At: at(6)}) // did not hold
	l.Apply(Event{Ev: EvSettled, Worker: 1, ID: "b", Action: "ack", At: at(7)})
	if got, unsettled := l.TakenBack(0, []string{"a", "b"}, time.Unix(0, at(1))); len(unsettled) > 0 || !got.Equal(time.Unix(0, at(7))) {
		t.Errorf("TakenBack = %v, %v unsettled, want the 7 s settlement and none", got, unsettled)
	}
	if got, ok := l.FirstSettleAfter(1, time.Unix(0, at(5.5))); !ok || !got.Equal(time.Unix(0, at(7))) {
		t.Errorf("FirstSettleAfter = %v, %v, want 7 s (the failed one at 6 s does not count)", got, ok)
	}
	if got := l.LongestPause(time.Unix(0, at(0)), time.Unix(0, at(10))); got != 5*time.Second {
		t.Errorf("LongestPause = %s, want 5s (0 to 5)", got)
	}
	// c's dead-letter write is refused at 2 s (it began at 1.5 s), then made for good at 9 s.
	l.Apply(Event{Ev: EvSettled, Worker: 1, ID: "c", Action: "dead_letter", Err: "refused", At: at(2), Took: int64(500 * time.Millisecond)})
	l.Apply(Event{Ev: EvSettled, Worker: 1, ID: "c", Action: "dead_letter", At: at(9)})
	last, n, never := l.Refused(time.Unix(0, at(4)))
	if n != 1 || never != 0 || !last.Equal(time.Unix(0, at(9))) {
		t.Errorf("Refused = %v, %d, %d, want 9 s, 1, 0", last, n, never)
	}
	if c := l.Counts(); c.FailedSettles["dead_letter"] != 1 || c.FailedSettles["ack"] != 1 || c.DeadLetteredAgain != 1 {
		t.Errorf("Counts = %+v, want one failed dead_letter and ack settlement, one message dead-lettered again", c)
	}
	if got, ok := l.FirstFinalAfter("dead_letter", time.Unix(0, at(4))); !ok || !got.Equal(time.Unix(0, at(9))) {
		t.Errorf("FirstFinalAfter = %v, %v, want 9 s", got, ok)
	}
}

// A dead letter confirmed before the dead-letter queue was deleted, and not read, was
// destroyed by the fault: not missing.
func TestLedgerDestroyed(t *testing.T) {
	l := NewLedger("q")
	l.Published("f0", 0, true)
	l.Published("f1", 1, true)
	l.Apply(Event{Ev: EvSettled, ID: "f0", Action: "dead_letter", At: at(1)})
	l.Apply(Event{Ev: EvSettled, ID: "f1", Action: "dead_letter", At: at(3)})
	if l.DeadLettersRead() {
		t.Error("DeadLettersRead with nothing read")
	}
	if n := l.Destroyed(time.Unix(0, at(2))); n != 1 {
		t.Errorf("Destroyed = %d, want 1 (f0, confirmed before the deletion)", n)
	}
	if c := l.Counts(); c.Destroyed != 1 || c.Missing != 1 {
		t.Errorf("Counts = %+v, want 1 destroyed and f1 missing", c)
	}
}

// FirstFailureAfter finds a worker's first failed receive or settlement after a time,
// not another worker's, nor a settlement that held.
func TestFirstFailureAfter(t *testing.T) {
	l := NewLedger("q")
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	for _, ev := range []Event{
		{Ev: EvRecvErr, Worker: 1, At: at(-time.Second), Err: "before"},
		{Ev: EvSettled, Worker: 1, At: at(time.Second), ID: "a", Action: "ack"},
		{Ev: EvRecvErr, Worker: 2, At: at(2 * time.Second), Err: "other worker"},
		{Ev: EvSettled, Worker: 1, At: at(4 * time.Second), ID: "b", Action: "ack", Err: "i/o timeout"},
		{Ev: EvRecvErr, Worker: 1, At: at(3 * time.Second), Err: "read: i/o timeout"},
	} {
		l.Apply(ev)
	}
	got, what, ok := l.FirstFailureAfter(1, t0)
	if !ok || !got.Equal(t0.Add(3*time.Second)) || what != "a failed receive: read: i/o timeout" {
		t.Errorf("FirstFailureAfter = %v, %q, %v; want 3 s after, the failed receive", got.Sub(t0), what, ok)
	}
	if _, _, ok := l.FirstFailureAfter(3, t0); ok {
		t.Error("a failure of a worker that reported none")
	}
}
