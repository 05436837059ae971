package main

import "testing"

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
