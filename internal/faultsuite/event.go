package faultsuite

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// The kinds of [Event] a worker process reports.
const (
	EvReady    = "ready"    // the runtime consumes
	EvReceived = "recv"     // a delivery was received (ReceiveHook)
	EvHandled  = "handled"  // a good message's handler ran to success
	EvTried    = "tried"    // a failing message's handler failed on purpose
	EvSettled  = "settled"  // a settlement finished (SettleHook); Err says whether it held
	EvRecvErr  = "recv_err" // a receive failed (ReceiveErrorHook)
	EvCut      = "cut"      // the worker's connections were cut
	EvHealed   = "healed"   // the worker's connections are let through again
	EvStopped  = "stopped"  // the runtime returned after a stop command
)

// Event is one line a worker process writes on its standard output: what its runtime
// did, when (At, Unix nanoseconds of the wall clock, which parent and workers share on
// one machine) and to which message (ID is the envelope's meta.id).
type Event struct {
	Ev       string `json:"ev"`
	Worker   int    `json:"w"`
	At       int64  `json:"t"`
	ID       string `json:"id,omitempty"`
	N        int    `json:"n,omitempty"`
	Attempts int    `json:"a,omitempty"`
	Kind     string `json:"kind,omitempty"`
	Action   string `json:"action,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Err      string `json:"err,omitempty"`
	// Took is how long a settlement took, in nanoseconds: it began at At-Took.
	Took int64 `json:"took,omitempty"`
}

// Time is the event's wall-clock time.
func (e Event) Time() time.Time { return time.Unix(0, e.At) }

// emitter writes events as JSON lines, each with one Write call, so that a line the
// worker wrote before it was killed is whole in the parent's pipe.
type emitter struct {
	mu     sync.Mutex
	w      io.Writer
	worker int
}

func (e *emitter) emit(ev Event) {
	ev.Worker = e.worker
	if ev.At == 0 {
		ev.At = time.Now().UnixNano()
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return // unreachable: Event has only strings and numbers
	}
	b = append(b, '\n')
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.w.Write(b)
}
