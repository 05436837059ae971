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
	EvFrozen   = "frozen"   // the worker's connections were frozen (Err: the switch cannot)
	EvThawed   = "thawed"   // the worker's connections thawed, or new ones let through (Err: the switch cannot)
	EvStopped  = "stopped"  // the runtime returned after a stop command
	EvSample   = "sample"   // the worker's Go runtime figures, on a sample command (Rt)
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
	// Lat is, on a handled or tried event, how long after its publish the handler
	// started, in nanoseconds: the handler's start less the publish time the payload
	// carries (Payload.At), both read from the wall clock the processes share.
	Lat int64 `json:"lat,omitempty"`
	// Rt is, on a sample event, what the worker's Go runtime says of itself.
	Rt *Runtime `json:"rt,omitempty"`
}

// Runtime is what a worker's Go runtime says of itself (runtime/metrics), for a soak
// run's samples. The process's resident memory and open descriptors are read from
// outside, by the run (/proc/<pid>).
type Runtime struct {
	// HeapLive is the heap the last garbage collection found live
	// (/gc/heap/live:bytes): the heap without the garbage of the current cycle.
	HeapLive uint64 `json:"heap_live"`
	// HeapObjects is the heap's objects now, garbage not yet collected included
	// (/memory/classes/heap/objects:bytes, the MemStats HeapAlloc).
	HeapObjects uint64 `json:"heap_objects"`
	// Goroutines is the number of live goroutines (/sched/goroutines:goroutines).
	Goroutines uint64 `json:"goroutines"`
	// Total is all the memory the Go runtime has mapped (/memory/classes/total:bytes).
	Total uint64 `json:"total"`
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
