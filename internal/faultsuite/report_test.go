package faultsuite

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMarkdownAndUpdateDoc(t *testing.T) {
	results := []*Result{
		{Broker: "Redis", Scenario: DLQFailure, Published: 3000, Handled: 2700, DeadLettered: 300, Recovery: 1200 * time.Millisecond,
			RecoveryOf: "from the heal", Bound: 5 * time.Second, Down: 5 * time.Second, Method: "a string | in its place", Settings: "retry_after=5"},
		{Broker: "Kafka", Scenario: Kill, Published: 3000, Handled: 2700, DeadLettered: 300, Duplicates: 6, Recovery: 10 * time.Second,
			RecoveryOf: "from the SIGKILL", Bound: 15 * time.Second, Down: 5 * time.Second},
		{Broker: "Redis", Scenario: Kill, Published: 3000, Handled: 2699, DeadLettered: 300, Missing: 1, Stalled: true, RecoveryOf: "from the SIGKILL"},
		{Broker: "SQS", Scenario: Kill, Published: 300, RecoveryOf: "the killed worker held no delivery"},
		{Broker: "Redis", Scenario: BlackholeForever, Published: 3000, Handled: 2700, DeadLettered: 300, Recovery: 2 * time.Second,
			RecoveryOf: "from fresh connections", Bound: 15 * time.Second, Down: 5 * time.Second,
			Detection: 3200 * time.Millisecond, DetectionOf: "from the freeze until worker 2 saw a failed receive", DetectBound: 10 * time.Second},
		{Broker: "Kafka", Scenario: Blackhole, Published: 3000, Handled: 2700, DeadLettered: 300, Bound: 5 * time.Second,
			DetectionOf: "workers 0, 1 saw no failure before the thaw", DetectBound: 10 * time.Second},
	}
	path := filepath.Join(t.TempDir(), "results.json")
	if err := WriteResults(path, results); err != nil {
		t.Fatal(err)
	}
	back, err := ReadResults(path)
	if err != nil {
		t.Fatal(err)
	}
	table := Markdown(back)
	for _, want := range []string{
		"| Kafka | worker SIGKILL | 3000 | 2700 | 300 | 0 | 6 | 10.0 s (≤ 15.0 s) | 5.00 s |",
		"| Redis | worker SIGKILL | 3000 | 2699 | 300 | 1 | 0 | **stalled** |",
		"| Redis | DLQ write failure | 3000 | 2700 | 300 | 0 | 0 | 1.20 s (≤ 5.00 s) | 5.00 s |",
		"| SQS | worker SIGKILL | 300 | 0 | 0 | 0 | 0 | n/a (the killed worker held no delivery) |",
		`a string \| in its place`, "| Redis | retry_after=5 |",
		"| Redis | connection blackhole, never healed | 3.20 s (≤ 10.0 s) | from the freeze until worker 2 saw a failed receive |",
		"| Kafka | connection blackhole | – (≤ 10.0 s) | workers 0, 1 saw no failure before the thaw |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	// Rows by broker, then in the order of Scenarios.
	if k, r1, r2 := strings.Index(table, "| Kafka | worker"), strings.Index(table, "| Redis | worker"), strings.Index(table, "| Redis | DLQ"); !(k < r1 && r1 < r2) {
		t.Errorf("rows out of order:\n%s", table)
	}

	doc := "# Title\n\nprose\n\n" + BeginMarker + "\nold table\n" + EndMarker + "\n\nmore prose\n"
	got, err := UpdateDoc(doc, table)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "old table") || !strings.Contains(got, table) || !strings.HasSuffix(got, EndMarker+"\n\nmore prose\n") {
		t.Errorf("UpdateDoc =\n%s", got)
	}
	if _, err := UpdateDoc("no markers", table); !errors.Is(err, ErrNoMarkers) {
		t.Errorf("UpdateDoc without markers = %v, want ErrNoMarkers", err)
	}
}

func TestFailures(t *testing.T) {
	ok := &Result{Recovery: 6 * time.Second, Bound: 5 * time.Second}
	if f := ok.Failures(2); len(f) != 0 {
		t.Errorf("6 s within twice a 5 s bound: %q", f)
	}
	if f := ok.Failures(1); len(f) != 1 || !strings.Contains(f[0], "past 5s") {
		t.Errorf("6 s past a 5 s bound: %q", f)
	}
	slow := &Result{Scenario: BlackholeForever, Bound: 15 * time.Second, Detection: 12 * time.Second, DetectBound: 10 * time.Second}
	if f := slow.Failures(1); len(f) != 1 || !strings.Contains(f[0], "dead connections found in 12s, past 10s") {
		t.Errorf("found dead in 12 s, bound 10 s: %q", f)
	}
	if f := slow.Failures(2); len(f) != 0 {
		t.Errorf("12 s within twice a 10 s bound: %q", f)
	}
	never := &Result{Scenario: BlackholeForever, Undetected: true, DetectionOf: "workers 1", DetectBound: 10 * time.Second}
	if f := never.Failures(2); len(f) != 1 || !strings.HasPrefix(f[0], "dead connections never found") {
		t.Errorf("never found dead: %q", f)
	}
	if f := (&Result{Scenario: Blackhole, Undetected: true, DetectBound: 10 * time.Second}).Failures(1); len(f) != 0 {
		t.Errorf("a blackhole that thaws needs no detection: %q", f)
	}
	bad := &Result{Missing: 2, MissingN: []int{4, 9}, Stalled: true, RecoveryOf: "x", Problems: []string{"p"}}
	if f := bad.Failures(1); len(f) != 3 || !strings.Contains(f[0], "[4 9]") || !strings.HasPrefix(f[1], "stalled") || f[2] != "p" {
		t.Errorf("Failures = %q", f)
	}
}

// The publisher's side of a cut: its figures in the report, and a publish error through a
// cut the publisher was behind fails the run (not one it was not behind).
func TestPublishingThroughACut(t *testing.T) {
	cut := &Result{Broker: "Redis", Scenario: Cut, Published: 300, Down: 5 * time.Second, PublisherCut: true,
		PublishesInFault: 1, PublishesInFaultOK: 1, LongestPublish: 5850 * time.Millisecond}
	failing := &Result{Broker: "SQS", Scenario: Cut, Published: 300, Down: 5 * time.Second, PublisherCut: true,
		PublishesInFault: 2, PublishesInFaultOK: 1, PublishErrors: 1, PublishErrorOf: "read: connection reset by peer\nmore",
		LongestPublish: 5578 * time.Millisecond}
	uncut := &Result{Broker: "Pulsar", Scenario: Cut, Published: 300, PublisherUncut: "its clients connect where a lookup sends them",
		PublishErrors: 2}
	table := Markdown([]*Result{cut, failing, uncut})
	for _, want := range []string{
		"| Redis | cut with the workers for 5.00 s | 1 (1) | 0 | 5.85 s | 0 |",
		"| SQS | cut with the workers for 5.00 s | 2 (1) | 1 | 5.58 s | 0 |",
		"| Pulsar | not cut: its clients connect where a lookup sends them | – | 2 | 0 s | 0 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	if f := cut.Failures(1); len(f) != 0 {
		t.Errorf("a publisher that rode out the cut fails the run: %q", f)
	}
	if f := failing.Failures(1); len(f) != 1 || !strings.Contains(f[0], "1 publishes failed through a cut") || strings.Contains(f[0], "more") {
		t.Errorf("a publish error through the cut: failures %q", f)
	}
	if f := uncut.Failures(1); len(f) != 0 {
		t.Errorf("publish errors of a publisher not behind the cut fail the run: %q", f)
	}
}
