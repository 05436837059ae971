package brokerproc

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// DeadLetter is what a restart test reads of a dead-lettered body.
type DeadLetter struct {
	Job      string `json:"job"`
	Attempts int    `json:"attempts"`
	Data     struct {
		N int `json:"n"`
	} `json:"data"`
	DeadLetter *struct {
		Reason        string `json:"reason"`
		OriginalQueue string `json:"original_queue"`
		Attempts      int    `json:"attempts"`
		Error         string `json:"error"`
	} `json:"dead_letter"`
}

// Workload is the bookkeeping of a restart test's run, in which message n carries
// {"n": n}, some messages fail on purpose until they are dead-lettered and the others
// are handled: what was published, how often each good message was handled, with which
// attempts each failing one was tried, what the dead-letter queue holds, and anomalies
// the handlers saw. Its methods are safe for concurrent use.
type Workload struct {
	queue, failJob string
	maxAttempts    int

	mu       sync.Mutex
	total    int
	failing  map[int]bool
	handled  map[int]int          // good message n -> times handled
	tried    map[int]map[int]bool // failing message n -> attempts seen
	dead     map[int]DeadLetter   // failing message n -> its first dead letter
	deadDups int
	anomaly  map[string]int
}

// NewWorkload returns the bookkeeping of a run on queue in which the messages of job
// failJob always fail and are dead-lettered after maxAttempts tries.
func NewWorkload(queue, failJob string, maxAttempts int) *Workload {
	return &Workload{
		queue: queue, failJob: failJob, maxAttempts: maxAttempts,
		failing: map[int]bool{}, handled: map[int]int{}, tried: map[int]map[int]bool{},
		dead: map[int]DeadLetter{}, anomaly: map[string]int{},
	}
}

// Published records that message i, one that fails if failing, was published; the
// run's messages are 0 to the last i recorded.
func (w *Workload) Published(i int, failing bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failing[i] = failing
	w.total = i + 1
}

// Handled records that the good message n was handled.
func (w *Workload) Handled(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handled[n]++
}

// Refuse records that the failing message n was tried with attempts, an anomaly if
// that is past the last try, and returns the error its handler fails with.
func (w *Workload) Refuse(n, attempts int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tried[n] == nil {
		w.tried[n] = map[int]bool{}
	}
	w.tried[n][attempts] = true
	if attempts >= w.maxAttempts {
		w.anomaly[fmt.Sprintf("failing message %d handled with attempts %d", n, attempts)]++
	}
	return fmt.Errorf("refused %d", n)
}

// Anomaly records something a handler saw that must not happen; Verdict reports each,
// with how often it was seen.
func (w *Workload) Anomaly(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.anomaly[fmt.Sprintf(format, args...)]++
}

// DeadLettered records a body read from the dead-letter queue. A second dead letter of
// the same message counts as a duplicate; the first one is kept.
func (w *Workload) DeadLettered(body []byte) error {
	var d DeadLetter
	if err := json.Unmarshal(body, &d); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.dead[d.Data.N]; dup {
		w.deadDups++
	} else {
		w.dead[d.Data.N] = d
	}
	return nil
}

// Accounted reports whether every message published so far was handled or, if it
// fails, dead-lettered.
func (w *Workload) Accounted() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.total {
		if w.failing[i] {
			if _, ok := w.dead[i]; !ok {
				return false
			}
		} else if w.handled[i] == 0 {
			return false
		}
	}
	return true
}

// Tally is how a run went, as Workload.Tally counts it.
type Tally struct {
	Total    int // messages published
	Handled  int // distinct good messages handled
	Repeats  int // handlings of good messages past the first
	Missing  int // good messages never handled
	Dead     int // distinct messages dead-lettered
	DeadDups int // dead letters of a message already dead-lettered
	UnDead   int // failing messages never dead-lettered
}

// Tally counts the run and reports through t.Errorf each dead letter that is not as
// the runtime writes it after maxAttempts tries, and each good message that was
// dead-lettered. For each dead-lettered failing message it calls checkTried with the
// attempts it was tried with. Call it once the runtime and the dead-letter reader have
// stopped.
func (w *Workload) Tally(t testing.TB, checkTried func(n int, tried map[int]bool)) Tally {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	tl := Tally{Total: w.total, Handled: len(w.handled), Dead: len(w.dead), DeadDups: w.deadDups}
	dlq := w.queue + ".dlq"
	for i := range w.total {
		switch {
		case w.failing[i]:
			d, ok := w.dead[i]
			if !ok {
				tl.UnDead++
				continue
			}
			if d.Job != w.failJob || d.Attempts != w.maxAttempts || d.DeadLetter == nil || d.DeadLetter.Reason != "failed" ||
				d.DeadLetter.Attempts != w.maxAttempts || d.DeadLetter.OriginalQueue != w.queue || d.DeadLetter.Error != fmt.Sprintf("refused %d", i) {
				t.Errorf("dead letter of %d = %+v (dead_letter %+v), want attempts %d, reason failed, queue %s", i, d, d.DeadLetter, w.maxAttempts, w.queue)
			}
			checkTried(i, w.tried[i])
		case w.handled[i] == 0:
			tl.Missing++
		default:
			tl.Repeats += w.handled[i] - 1
			if _, ok := w.dead[i]; ok {
				t.Errorf("good message %d is in %s", i, dlq)
			}
		}
	}
	return tl
}

// Verdict ends the test if the run lost a message (a good one never handled, a failing
// one never dead-lettered), and reports through t.Errorf a dead-letter queue that does
// not hold each failing message once, and each anomaly.
func (w *Workload) Verdict(t testing.TB, tl Tally) {
	t.Helper()
	if tl.Missing > 0 || tl.UnDead > 0 {
		t.Fatalf("lost across the restart: %d good messages never handled, %d failing messages never dead-lettered", tl.Missing, tl.UnDead)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	want := 0
	for i := range w.total {
		if w.failing[i] {
			want++
		}
	}
	if len(w.dead) != want {
		t.Errorf("%s.dlq holds %d distinct messages, want %d", w.queue, len(w.dead), want)
	}
	for what, k := range w.anomaly {
		t.Errorf("%s (%d times)", what, k)
	}
}

// Run is a restart run's producer and the broker restart it starts, as Produce starts
// them. Its timings are for the test log; read them after Wait.
type Run struct {
	published  chan struct{}
	triggered  atomic.Bool
	restarted  atomic.Bool
	restartErr chan error

	TermAt    time.Time     // when the broker was told to stop
	BackAt    time.Time     // when it was up again
	StoppedIn time.Duration // how long it took to stop
	DownFor   time.Duration // from TermAt to BackAt
	AfterBack int           // messages published after the broker was back
}

// Produce starts the producer of a restart run: a steady stream, message i every 10ms,
// every fifth one (i%5 == 0) failing; after message 100 it restarts the broker (stop,
// then start, beside the stream) and it goes on through the outage until at least 400
// messages are published and 100 of them after the broker was back, or ctx ends.
// publish publishes message i and reports whether it did; the messages it did are
// recorded as Published.
func (w *Workload) Produce(ctx context.Context, publish func(i int, failing bool) bool, stop func(), start func() error) *Run {
	r := &Run{published: make(chan struct{}), restartErr: make(chan error, 1)}
	go func() {
		defer close(r.published)
		for i := 0; (i < 400 || r.AfterBack < 100) && ctx.Err() == nil; i++ {
			failing := i%5 == 0
			if !publish(i, failing) {
				continue
			}
			w.Published(i, failing)
			if r.restarted.Load() {
				r.AfterBack++
			}
			if i == 100 {
				r.triggered.Store(true)
				go func() {
					r.TermAt = time.Now()
					stop()
					r.StoppedIn = time.Since(r.TermAt)
					err := start()
					r.BackAt = time.Now()
					r.DownFor = r.BackAt.Sub(r.TermAt)
					r.restarted.Store(true)
					r.restartErr <- err
				}()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return r
}

// Published is closed once the producer has stopped publishing.
func (r *Run) Published() <-chan struct{} { return r.published }

// Wait waits for the producer to end and ends the test if it never reached the restart
// or the broker did not start again.
func (r *Run) Wait(t testing.TB) {
	t.Helper()
	<-r.published
	if !r.triggered.Load() {
		t.Fatal("the producer never reached the restart")
	}
	if err := <-r.restartErr; err != nil {
		t.Fatal(err)
	}
}

// Drain waits for the producer, and the restart it started, to end; defer it after
// cancelling the producer's context, so neither outlives the test.
func (r *Run) Drain() {
	<-r.published
	if r.triggered.Load() && !r.restarted.Load() {
		<-r.restartErr
	}
}
