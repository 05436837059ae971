package redis

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// maxGroup bounds how many calls one group sends to Redis at once.
const maxGroup = 64

// groupLanes is how many groups of one kind the transport keeps in flight at once: calls
// queue up (and go together) only when that many are already out, so a few workers do
// not wait on each other's round trips.
const groupLanes = 4

// committer sends calls to Redis in groups (a group commit). A call that finds fewer than
// lanes groups in flight goes to Redis at once, alone, so a lone caller waits for nothing
// and no timer is involved; calls that arrive while lanes groups are in flight queue up,
// and when one returns the first of them sends all the queued ones (up to [maxGroup]) in
// one round trip.
//
// Each call still gets its own result. A queued call whose context ends before its group
// leaves is dropped and reports ctx.Err(); once its group has left, a call waits for the
// reply, which is abandoned only when the context of every call in the group has ended.
type committer[T any] struct {
	// run sends one group and sets the result of each call in it.
	run func(ctx context.Context, calls []*call[T])

	// lanes is how many groups may be in flight at once (0 means 1).
	lanes int

	mu    sync.Mutex
	busy  int        // groups in flight (or being formed)
	queue []*call[T] // calls waiting for the next group
}

// call is one request to a committer and, after do, its result.
type call[T any] struct {
	ctx  context.Context
	arg  T
	ok   bool  // result: call-specific success (e.g. the settle gate passed)
	err  error // result
	wake chan bool
}

// do sends cl in a group and returns when its result is set.
func (g *committer[T]) do(ctx context.Context, cl *call[T]) {
	cl.ctx = ctx
	g.mu.Lock()
	if g.busy >= max(g.lanes, 1) {
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
				cl.err = ctx.Err()
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
	n := min(len(g.queue), maxGroup-1)
	group := make([]*call[T], 0, n+1)
	group = append(group, cl)
	group = append(group, g.queue[:n]...)
	g.queue = slices.Delete(g.queue, 0, n)
	g.mu.Unlock()

	if len(group) == 1 {
		g.run(ctx, group)
	} else {
		gctx, cancel := groupContext(group)
		g.run(gctx, group)
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
func groupContext[T any](group []*call[T]) (context.Context, context.CancelFunc) {
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
