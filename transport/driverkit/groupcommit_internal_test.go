package driverkit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestGroupCommitGroupsConcurrentCalls: a lone call runs alone and at once; calls made
// while a group is in flight go together in the next group, each with its own result; a
// queued call whose context ends leaves without being sent.
func TestGroupCommitGroupsConcurrentCalls(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var groups [][]int
	g := GroupCommit[int]{Send: func(ctx context.Context, calls []*GroupCall[int]) {
		var args []int
		for _, cl := range calls {
			args = append(args, cl.Arg)
			cl.OK = cl.Arg%2 == 0
		}
		mu.Lock()
		groups = append(groups, args)
		first := len(groups) == 1
		mu.Unlock()
		if first {
			<-release // hold the first group in flight while the others queue
		}
	}}

	first := &GroupCall[int]{Arg: 0}
	done := make(chan struct{})
	go func() { g.Do(context.Background(), first); close(done) }()
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(groups) == 1 })

	calls := make([]*GroupCall[int], 8)
	var wg sync.WaitGroup
	for i := range calls {
		calls[i] = &GroupCall[int]{Arg: i + 1}
		wg.Add(1)
		go func() { defer wg.Done(); g.Do(context.Background(), calls[i]) }()
	}
	cancelled := &GroupCall[int]{Arg: 99}
	ctx, cancel := context.WithCancel(context.Background())
	cdone := make(chan struct{})
	go func() { g.Do(ctx, cancelled); close(cdone) }()
	eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) == 9 })
	cancel()
	<-cdone
	if !errors.Is(cancelled.Err, context.Canceled) {
		t.Fatalf("cancelled queued call: err = %v", cancelled.Err)
	}
	close(release)
	<-done
	wg.Wait()

	if len(groups) != 2 || len(groups[0]) != 1 || len(groups[1]) != 8 {
		t.Fatalf("groups = %v, want [[0] [the 8 queued calls]]", groups)
	}
	for _, cl := range calls {
		if cl.Err != nil || cl.OK != (cl.Arg%2 == 0) {
			t.Errorf("call %d: ok=%v err=%v", cl.Arg, cl.OK, cl.Err)
		}
	}
	for _, a := range groups[1] {
		if a == 99 {
			t.Error("the cancelled call was sent")
		}
	}
	if g.inFlight() {
		t.Error("GroupCommit still busy after every call returned")
	}
}

func (g *GroupCommit[T]) inFlight() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.busy > 0 || len(g.queue) > 0
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGroupCommitLanes: with two lanes, two lone calls are in flight at once, each alone;
// a third call made while both are out waits and goes when one of them returns.
func TestGroupCommitLanes(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var groups [][]int
	running := 0
	g := GroupCommit[int]{Lanes: 2, Send: func(ctx context.Context, calls []*GroupCall[int]) {
		var args []int
		for _, cl := range calls {
			args = append(args, cl.Arg)
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
		wg.Add(1)
		go func() { defer wg.Done(); g.Do(context.Background(), &GroupCall[int]{Arg: i}) }()
	}
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return running == 2 })
	wg.Add(1)
	go func() { defer wg.Done(); g.Do(context.Background(), &GroupCall[int]{Arg: 2}) }()
	eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) == 1 })
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
		t.Error("GroupCommit still busy after every call returned")
	}
}
