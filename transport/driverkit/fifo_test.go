package driverkit_test

import (
	"slices"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// A FIFO hands items back in order through pushes, pops and truncations, and a steady
// flow through it reuses its array instead of growing it.
func TestFIFO(t *testing.T) {
	var q driverkit.FIFO[int]
	var want []int
	next := 0
	for round := range 200 {
		for range round%7 + 1 {
			q.Push(next)
			want = append(want, next)
			next++
		}
		for range round % 5 {
			if q.Len() == 0 {
				break
			}
			if got := q.Pop(); got != want[0] {
				t.Fatalf("Pop = %d, want %d", got, want[0])
			}
			want = want[1:]
		}
		if round%50 == 49 {
			q.Truncate(q.Len() / 2)
			want = want[:len(want)/2]
		}
		if !slices.Equal(q.Items(), want) || q.Len() != len(want) {
			t.Fatalf("round %d: items %v, want %v", round, q.Items(), want)
		}
		if q.Len() > 0 && *q.Front() != want[0] {
			t.Fatalf("Front = %d, want %d", *q.Front(), want[0])
		}
	}
	q.Truncate(0)
	if q.Len() != 0 {
		t.Fatalf("Len after Truncate(0) = %d", q.Len())
	}
	allocs := testing.AllocsPerRun(100, func() {
		for i := range 64 {
			q.Push(i)
		}
		for range 64 {
			q.Pop()
		}
	})
	if allocs != 0 {
		t.Fatalf("a steady flow allocates %.1f times a round, want 0", allocs)
	}
}
