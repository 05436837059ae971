// Package benchpair times a baseline and the work measured against it in turns inside
// one benchmark, so that both see the same machine load: on a shared machine whose load
// changes from second to second, two benchmarks run one after the other compare two
// different machines.
package benchpair

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// Run calls base and work b.N times each, in turns (the order swapped every turn), each
// call doing per units of work (messages). It reports, per unit, the baseline's and the
// work's median time (base-ns/op, work-ns/op, in ns per unit), and vs-base: the median
// over the turns of the baseline's time over the work's (1 = as fast, above 1 = faster
// than the baseline). A call that fails ends the benchmark.
func Run(b *testing.B, per int, base, work func() error) {
	b.Helper()
	bt, wt := Turns(b, base, work)
	ratios := make([]float64, len(bt))
	for i := range bt {
		ratios[i] = float64(bt[i]) / float64(wt[i])
	}
	b.ReportMetric(float64(median(bt))/float64(per), "base-ns/op")
	b.ReportMetric(float64(median(wt))/float64(per), "work-ns/op")
	b.ReportMetric(medianF(ratios), "vs-base")
}

// Turns calls base and work b.N times each, in turns (the order swapped every turn),
// under the benchmark's timer, and returns how long each call took, turn by turn. A call
// that fails ends the benchmark.
func Turns(b *testing.B, base, work func() error) (baseTimes, workTimes []time.Duration) {
	b.Helper()
	baseTimes = make([]time.Duration, 0, b.N)
	workTimes = make([]time.Duration, 0, b.N)
	timed := func(f func() error, into *[]time.Duration) {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*into = append(*into, time.Since(start))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			timed(base, &baseTimes)
			timed(work, &workTimes)
		} else {
			timed(work, &workTimes)
			timed(base, &baseTimes)
		}
	}
	b.StopTimer()
	return baseTimes, workTimes
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func medianF(fs []float64) float64 {
	s := slices.Clone(fs)
	slices.Sort(s)
	return s[len(s)/2]
}

// Callbacks waits for asynchronous completions (a producer's promises) and keeps the
// first error they report.
type Callbacks struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

// Add expects n more completions.
func (c *Callbacks) Add(n int) { c.wg.Add(n) }

// Done records one completion and its error.
func (c *Callbacks) Done(err error) {
	if err != nil {
		c.mu.Lock()
		if c.err == nil {
			c.err = err
		}
		c.mu.Unlock()
	}
	c.wg.Done()
}

// Wait returns once every expected completion came, with the first error.
func (c *Callbacks) Wait() error {
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
