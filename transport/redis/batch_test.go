package redis

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestCommitterGroupsConcurrentCalls: a lone call runs alone and at once; calls made
// while a group is in flight go together in the next group, each with its own result; a
// queued call whose context ends leaves without being sent.
func TestCommitterGroupsConcurrentCalls(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var groups [][]int
	g := committer[int]{run: func(ctx context.Context, calls []*call[int]) {
		var args []int
		for _, cl := range calls {
			args = append(args, cl.arg)
			cl.ok = cl.arg%2 == 0
		}
		mu.Lock()
		groups = append(groups, args)
		first := len(groups) == 1
		mu.Unlock()
		if first {
			<-release // hold the first group in flight while the others queue
		}
	}}

	first := &call[int]{arg: 0}
	done := make(chan struct{})
	go func() { g.do(context.Background(), first); close(done) }()
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(groups) == 1 })

	calls := make([]*call[int], 8)
	var wg sync.WaitGroup
	for i := range calls {
		calls[i] = &call[int]{arg: i + 1}
		wg.Go(func() { g.do(context.Background(), calls[i]) })
	}
	cancelled := &call[int]{arg: 99}
	ctx, cancel := context.WithCancel(context.Background())
	cdone := make(chan struct{})
	go func() { g.do(ctx, cancelled); close(cdone) }()
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) == 9 })
	cancel()
	<-cdone
	if !errors.Is(cancelled.err, context.Canceled) {
		t.Fatalf("cancelled queued call: err = %v", cancelled.err)
	}
	close(release)
	<-done
	wg.Wait()

	if len(groups) != 2 || len(groups[0]) != 1 || len(groups[1]) != 8 {
		t.Fatalf("groups = %v, want [[0] [the 8 queued calls]]", groups)
	}
	for _, cl := range calls {
		if cl.err != nil || cl.ok != (cl.arg%2 == 0) {
			t.Errorf("call %d: ok=%v err=%v", cl.arg, cl.ok, cl.err)
		}
	}
	for _, a := range groups[1] {
		if a == 99 {
			t.Error("the cancelled call was sent")
		}
	}
	if g.inFlight() {
		t.Error("committer still busy after every call returned")
	}
}

func (g *committer[T]) inFlight() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.busy > 0 || len(g.queue) > 0
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCommitterLanes: with two lanes, two lone calls are in flight at once, each alone;
// a third call made while both are out waits and goes when one of them returns.
func TestCommitterLanes(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var groups [][]int
	running := 0
	g := committer[int]{lanes: 2, run: func(ctx context.Context, calls []*call[int]) {
		var args []int
		for _, cl := range calls {
			args = append(args, cl.arg)
		}
		mu.Lock()
		groups = append(groups, args)
		running++
		held := len(groups) <= 2
		mu.Unlock()
		if held {
			<-release
		}
		mu.Lock()
		running--
		mu.Unlock()
	}}
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { g.do(context.Background(), &call[int]{arg: i}) })
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return running == 2 })
	wg.Go(func() { g.do(context.Background(), &call[int]{arg: 2}) })
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) == 1 })
	mu.Lock()
	if len(groups) != 2 {
		t.Errorf("a third group went out while two lanes were busy: %v", groups)
	}
	mu.Unlock()
	close(release)
	wg.Wait()
	if len(groups) != 3 || len(groups[2]) != 1 || groups[2][0] != 2 {
		t.Fatalf("groups = %v, want two lone calls, then the queued one alone", groups)
	}
	if g.inFlight() {
		t.Error("committer still busy after every call returned")
	}
}
