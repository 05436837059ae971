package driverkit

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// GroupCommit sends calls to the broker in groups (a group commit): the acknowledgements
// or publishes that several workers make at once go in one request. A call that finds
// fewer than Lanes groups in flight goes to the broker at once, alone, in the caller's
// goroutine, so a lone caller waits for nothing and no timer or goroutine is involved;
// calls that arrive while Lanes groups are in flight queue up, and when one returns the
// first of them sends all the queued ones (up to Max) in one request.
//
// Each call gets its own result. A queued call whose context ends before its group
// leaves is dropped and reports ctx.Err(); once its group has left, a call waits for the
// reply, which is abandoned only when the context of every call in the group has ended.
// ([Coalescer] sends one request at a time from a goroutine of its own, and its calls
// leave when their context ends.) The zero value is not usable: set Send.
type GroupCommit[T any] struct {
	// Send sends one group and sets the result of each call in it.
	Send func(ctx context.Context, calls []*GroupCall[T])
	// Lanes is how many groups may be in flight at once (0 means 1); Max bounds the
	// calls of one group (0 means 64).
	Lanes, Max int

	mu    sync.Mutex
	busy  int             // groups in flight (or being formed)
	queue []*GroupCall[T] // calls waiting for the next group
}

// GroupCall is one request to a [GroupCommit] and, after [GroupCommit.Do], its result.
type GroupCall[T any] struct {
	Arg T
	OK  bool  // a result of the call's own (a settle's gate passed), set by Send
	Err error // set by Send; ctx.Err() for a call dropped before it was sent

	ctx  context.Context
	wake chan bool
}

// Do sends cl in a group and returns when its result is set.
func (g *GroupCommit[T]) Do(ctx context.Context, cl *GroupCall[T]) {
	cl.ctx = ctx
	g.mu.Lock()
	if g.busy >= max(g.Lanes, 1) {
		cl.wake = make(chan bool, 1)
		g.queue = append(g.queue, cl)
		g.mu.Unlock()
		var lead bool
		select {
		case lead = <-cl.wake:
		case <-ctx.Done():
			g.mu.Lock()
			if i := slices.Index(g.queue, cl); i >= 0 {
				g.queue = slices.Delete(g.queue, i, i+1)
				g.mu.Unlock()
				cl.Err = ctx.Err()
				return
			}
			g.mu.Unlock()
			lead = <-cl.wake // already in a group, or chosen to lead the next one
		}
		if !lead {
			return
		}
	} else {
		g.busy++
		g.mu.Unlock()
	}

	// cl leads: it sends itself and whatever is queued, then hands the lead on.
	g.mu.Lock()
	n := min(len(g.queue), max(cmp.Or(g.Max, 64), 1)-1)
	group := make([]*GroupCall[T], 0, n+1)
	group = append(group, cl)
	group = append(group, g.queue[:n]...)
	g.queue = slices.Delete(g.queue, 0, n)
	g.mu.Unlock()

	if len(group) == 1 {
		g.Send(ctx, group)
	} else {
		gctx, cancel := groupContext(group)
		g.Send(gctx, group)
		cancel()
	}
	for _, f := range group[1:] {
		f.wake <- false
	}

	g.mu.Lock()
	if len(g.queue) == 0 {
		g.busy--
		g.mu.Unlock()
		return
	}
	next := g.queue[0]
	g.queue = slices.Delete(g.queue, 0, 1)
	g.mu.Unlock()
	next.wake <- true
}

// groupContext is the context a group of several calls is sent under: one with the
// first call's values that ends only when every call's context has ended, so one caller
// giving up does not fail the others. (A call alone is sent under its own context.)
func groupContext[T any](group []*GroupCall[T]) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(group[0].ctx)
	for _, cl := range group {
		if cl.ctx.Done() == nil { // this caller never gives up, so neither does the group
			return base, func() {}
		}
	}
	ctx, cancel := context.WithCancel(base)
	var left atomic.Int32
	left.Store(int32(len(group)))
	stops := make([]func() bool, len(group))
	for i, cl := range group {
		stops[i] = context.AfterFunc(cl.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
