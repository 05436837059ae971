package faultsuite

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) events(t *testing.T) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var evs []Event
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if line == "" {
			continue
		}
		var ev Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("a line that is not an event: %q", line)
		}
		evs = append(evs, ev)
	}
	return evs
}

type recordingSwitch struct {
	mu    sync.Mutex
	flips []string
}

func (s *recordingSwitch) Down() { s.mu.Lock(); s.flips = append(s.flips, "down"); s.mu.Unlock() }
func (s *recordingSwitch) Up()   { s.mu.Lock(); s.flips = append(s.flips, "up"); s.mu.Unlock() }

// A worker reports, one JSON line each, that it consumes, what it received, handled,
// tried and settled, and obeys cut, heal and stop.
func TestWorkerReportsAndObeys(t *testing.T) {
	tr := memory.New()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := babelqueue.New(tr, babelqueue.WithQueue("q"))
	if err != nil {
		t.Fatal(err)
	}
	good, err := pub.Publish(ctx, URNGood, Payload{N: 0})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := pub.Publish(ctx, URNFail, Payload{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	sw := &recordingSwitch{}
	open := func(context.Context, WorkerSpec) (transport.Transport, Switch, error) { return tr, sw, nil }
	in, cmds := io.Pipe()
	out := &syncBuffer{}
	spec := WorkerSpec{Broker: "memory", URL: "memory://", Queue: "q", Worker: 7, Concurrency: 1, MaxAttempts: 2, Cut: true}
	done := make(chan error, 1)
	go func() { done <- runWorker(ctx, spec, open, in, out, slog.New(slog.DiscardHandler)) }()

	wait := func(what string, ok func([]Event) bool) {
		t.Helper()
		for ctx.Err() == nil {
			if ok(out.events(t)) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("no %s in %+v", what, out.events(t))
	}
	has := func(match func(Event) bool) func([]Event) bool {
		return func(evs []Event) bool {
			for _, ev := range evs {
				if match(ev) {
					return true
				}
			}
			return false
		}
	}
	wait("dead letter", has(func(ev Event) bool {
		return ev.Ev == EvSettled && ev.ID == bad && ev.Action == string(babelqueue.ActionDeadLetter) && ev.Reason == "failed" && ev.Err == ""
	}))
	wait("handled", has(func(ev Event) bool { return ev.Ev == EvHandled && ev.ID == good && ev.N == 0 }))
	wait("ready", has(func(ev Event) bool { return ev.Ev == EvReady }))
	for _, c := range []string{cmdCut, cmdHeal, cmdStop} {
		if _, err := io.WriteString(cmds, c+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("runWorker: %v", err)
	}
	count := map[string]int{}
	for _, ev := range out.events(t) {
		count[ev.Ev]++
		if ev.Worker != 7 || ev.At == 0 {
			t.Errorf("event %+v lacks the worker's number or its time", ev)
		}
	}
	for ev, want := range map[string]int{EvReady: 1, EvTried: 2, EvHandled: 1, EvCut: 1, EvHealed: 1, EvStopped: 1} {
		if count[ev] != want {
			t.Errorf("%d %q events, want %d (all: %v)", count[ev], ev, want, count)
		}
	}
	if count[EvReceived] != 3 || count[EvSettled] != 3 {
		t.Errorf("%d received and %d settled, want 3 of each (good, failing, its retry)", count[EvReceived], count[EvSettled])
	}
	if strings.Join(sw.flips, ",") != "down,up" {
		t.Errorf("the switch went %v, want down then up", sw.flips)
	}
}

// freezingSwitch is a recordingSwitch that can freeze.
type freezingSwitch struct{ recordingSwitch }

func (s *freezingSwitch) Freeze() { s.mu.Lock(); s.flips = append(s.flips, "freeze"); s.mu.Unlock() }
func (s *freezingSwitch) Thaw()   { s.mu.Lock(); s.flips = append(s.flips, "thaw"); s.mu.Unlock() }
func (s *freezingSwitch) Strand() { s.mu.Lock(); s.flips = append(s.flips, "strand"); s.mu.Unlock() }

// A worker obeys freeze, thaw and strand through a switch that can freeze, and
// acknowledges each; through one that cannot, it acknowledges them with an error, which
// fails the run's command instead of a blackhole that never happened.
func TestWorkerFreezes(t *testing.T) {
	for _, tc := range []struct {
		name string
		sw   Switch
	}{{"freezer", &freezingSwitch{}}, {"plain switch", &recordingSwitch{}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			open := func(context.Context, WorkerSpec) (transport.Transport, Switch, error) {
				return memory.New(), tc.sw, nil
			}
			out := &syncBuffer{}
			spec := WorkerSpec{Broker: "memory", URL: "memory://", Queue: "q", Concurrency: 1, MaxAttempts: 2, Cut: true}
			in := strings.NewReader(strings.Join([]string{cmdFreeze, cmdThaw, cmdFreeze, cmdStrand, cmdStop}, "\n") + "\n")
			if err := runWorker(ctx, spec, open, in, out, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
			var acks []string
			for _, ev := range out.events(t) {
				if ev.Ev == EvFrozen || ev.Ev == EvThawed {
					acks = append(acks, ev.Ev)
					if _, freezes := tc.sw.(Freezer); freezes != (ev.Err == "") {
						t.Errorf("ack %+v: error %q", ev, ev.Err)
					}
				}
			}
			if got := strings.Join(acks, ","); got != "frozen,thawed,frozen,thawed" {
				t.Errorf("acks %s, want frozen,thawed,frozen,thawed", got)
			}
			if f, ok := tc.sw.(*freezingSwitch); ok {
				if got := strings.Join(f.flips, ","); got != "freeze,thaw,freeze,strand" {
					t.Errorf("the switch went %s, want freeze,thaw,freeze,strand", got)
				}
			}
		})
	}
}

func TestSpecRoundTrips(t *testing.T) {
	spec := WorkerSpec{Broker: "Redis", URL: "redis://127.0.0.1:6379/0", Queue: "q", Worker: 3, Concurrency: 2,
		MaxAttempts: 3, HandlerDelay: 20 * time.Millisecond, Cut: true}
	for _, kv := range spec.environ() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	if !IsWorker() {
		t.Error("IsWorker is false in a worker's environment")
	}
	got, err := specFromEnv()
	if err != nil || got != spec {
		t.Errorf("specFromEnv = %+v, %v, want %+v", got, err, spec)
	}
	t.Setenv(envWorker, "x")
	if _, err := specFromEnv(); err == nil {
		t.Error("specFromEnv accepted a worker number that is not a number")
	}
}
