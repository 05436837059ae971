package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestSummarizeChecksEachMessageOnce(t *testing.T) {
	a := result{First: 1e9, Last: 2e9, CPU: 0.5, Count: 3, Handled: []int{0, 2, 1}}
	b := result{First: 1.5e9, Last: 3e9, CPU: 0.5, Count: 1, Handled: []int{3}}
	s := summarize([]result{a, b}, 4, checkOnce)
	if s.check != "" {
		t.Fatalf("all four handled once, got %q", s.check)
	}
	if s.rate != 2 || s.cpuPerMsg != 250000 {
		t.Fatalf("rate %v msgs/s (want 4 over 2 s), cpu %v µs (want 1 s over 4)", s.rate, s.cpuPerMsg)
	}
	dup := result{First: 1e9, Last: 2e9, Count: 4, Handled: []int{0, 1, 1, 7}}
	if s := summarize([]result{dup}, 4, checkOnce); s.check != "missing 2, duplicates 1, strays 1" {
		t.Fatalf("check %q", s.check)
	}
}

func TestSummarizeHalfFailing(t *testing.T) {
	ok := result{First: 1e9, Last: 2e9, Count: 8, Handled: []int{0, 1, 1, 1, 2, 3, 3, 3}}
	s := summarize([]result{ok}, 4, checkHalfFailing)
	if s.check != "" || s.rate != 4 || s.deliveryRate != 8 {
		t.Fatalf("even once and odd three times: check %q, rate %v (want 4 finished over 1 s), deliveries %v/s (want 8)", s.check, s.rate, s.deliveryRate)
	}
	short := result{First: 1e9, Last: 2e9, Count: 6, Handled: []int{0, 1, 1, 2, 3, 3}}
	if s := summarize([]result{short}, 4, checkHalfFailing); s.check != "missing 2, duplicates 0, strays 0" {
		t.Fatalf("check %q", s.check)
	}
}

// A steady consumer's result leaves out what was published, and the memory read,
// before its warm-up had passed since its first message, and after its last.
func TestSteadyRecorderLeavesOutTheWarmUp(t *testing.T) {
	const s = int64(time.Second)
	r := &recorder{steady: true, warm: time.Second, stopMem: make(chan struct{}), memGone: make(chan struct{})}
	close(r.memGone)
	r.first, r.last = 10*s, 20*s
	r.handled = []int{0, 1, 2, 3}
	r.lats = []latency{{at: 9 * s, took: 5e9}, {at: 10*s + 5e8, took: 4e9}, {at: 11 * s, took: 100}, {at: 15 * s, took: 300}}
	r.mem = []memReading{{at: 10 * s, rss: 1e9, heap: 1e9}, {at: 12 * s, rss: 10, heap: 1}, {at: 13 * s, rss: 30, heap: 3},
		{at: 14 * s, rss: 20, heap: 2}, {at: 21 * s, rss: 1e9, heap: 1e9}}
	res := r.result()
	if fmt.Sprint(res.Lats) != "[100 300]" {
		t.Errorf("latencies %v, want those published from 11 s on: [100 300]", res.Lats)
	}
	if res.RSS != 20 || res.Heap != 2 {
		t.Errorf("RSS %v, heap %v: want the medians of the readings from 11 s to 20 s, 20 and 2", res.RSS, res.Heap)
	}
	if res.Count != 4 || len(res.Handled) != 4 {
		t.Errorf("count %d: every message counts for the check", res.Count)
	}
}

// The body of a paced publish carries its instant; any other body is the one the
// earlier runs published.
func TestBodyCarriesThePublishInstantWhenPaced(t *testing.T) {
	plain := string(body(7, 0))
	if !strings.Contains(plain, `"data":{"n":7},`) {
		t.Errorf("body(7, 0) = %s", plain)
	}
	for _, at := range []int64{0, 1749132727000123456} {
		n, got, err := dataN(body(42, at))
		if err != nil || n != 42 || got != at {
			t.Errorf("dataN(body(42, %d)) = %d, %d, %v", at, n, got, err)
		}
	}
	if p := percentile([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.99); p != 10 {
		t.Errorf("p99 of 1..10 = %d", p)
	}
	if p := percentile([]int64{1, 2, 3, 4}, 0.5); p != 2 {
		t.Errorf("p50 of 1..4 = %d", p)
	}
}
