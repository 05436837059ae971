package benchpair_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/babelqueue-go/babelqueue/internal/benchpair"
)

func TestCallbacksWaitsForEveryCompletionAndKeepsTheFirstError(t *testing.T) {
	var cbs benchpair.Callbacks
	first := errors.New("first")
	var done atomic.Int32
	cbs.Add(3)
	release := make(chan struct{})
	go func() {
		<-release
		cbs.Done(nil)
		done.Add(1)
		cbs.Done(first)
		done.Add(1)
		cbs.Done(errors.New("second"))
		done.Add(1)
	}()
	close(release)
	if err := cbs.Wait(); !errors.Is(err, first) {
		t.Fatalf("Wait: %v, want the first error", err)
	}
	if n := done.Load(); n < 2 {
		t.Fatalf("Wait returned after %d of 3 completions", n)
	}
	var ok benchpair.Callbacks
	ok.Add(1)
	ok.Done(nil)
	if err := ok.Wait(); err != nil {
		t.Fatalf("Wait with no error: %v", err)
	}
}

func TestRunCallsBothSidesInTurns(t *testing.T) {
	var base, work int
	res := testing.Benchmark(func(b *testing.B) {
		base, work = 0, 0
		benchpair.Run(b, 10, func() error { base++; return nil }, func() error { work++; return nil })
	})
	if base == 0 || base != work || res.N != base {
		t.Fatalf("base ran %d times, work %d, b.N %d: want both b.N times", base, work, res.N)
	}
	for _, m := range []string{"base-ns/op", "work-ns/op", "vs-base"} {
		if _, ok := res.Extra[m]; !ok {
			t.Errorf("metric %s not reported (got %v)", m, res.Extra)
		}
	}
}
