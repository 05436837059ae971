package driverkit_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// dueList is a list of items due at given times, for RunDue.
type dueList struct {
	mu    sync.Mutex
	at    map[string]time.Time
	fired []string
	fails int // fire fails this many times first
}

func (l *dueList) due(now time.Time) ([]string, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var items []string
	var next time.Time
	for k, at := range l.at {
		if !at.After(now) {
			items = append(items, k)
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	slices.Sort(items)
	return items, next
}

func (l *dueList) fire(items []string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fails > 0 {
		l.fails--
		return false
	}
	for _, k := range items {
		delete(l.at, k)
		l.fired = append(l.fired, k)
	}
	return true
}

func (l *dueList) park(k string, at time.Time) {
	l.mu.Lock()
	l.at[k] = at
	l.mu.Unlock()
}

func (l *dueList) firedNow() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.fired)
}

// RunDue fires each item once it is due (not before), finds an item parked later when
// woken, waits the retry after a failed fire before it fires again, and returns when its
// context ends.
func TestRunDue(t *testing.T) {
	start := time.Now()
	l := &dueList{at: map[string]time.Time{"a": start, "b": start.Add(150 * time.Millisecond)}, fails: 1}
	wake := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		driverkit.RunDue(ctx, wake, 100*time.Millisecond, l.due, l.fire)
		close(done)
	}()
	waitFor := func(want ...string) time.Duration {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !slices.Equal(l.firedNow(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("fired %v, want %v", l.firedNow(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(start)
	}
	if d := waitFor("a"); d < 100*time.Millisecond {
		t.Fatalf("a fired %s after start, before the retry after the failed fire", d)
	}
	if d := waitFor("a", "b"); d < 150*time.Millisecond {
		t.Fatalf("b fired %s after start, before it was due", d)
	}
	l.park("c", time.Now())
	wake <- struct{}{}
	waitFor("a", "b", "c")
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("RunDue did not return once its context ended")
	}
}
