package faultsuite

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
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
		"**Kafka**\n\n| Scenario | Published | Handled | Dead-lettered | Missing | Duplicates (bound) | Recovery (bound) | Fault lasted | Dead connections found (bound) | Publish errors through the cut | Verdict |",
		"| worker SIGKILL | 3000 | 2700 | 300 | 0 | 6 (no bound) | 10.0 s (≤ 15.0 s) | 5.00 s | – | – | ok |",
		"| worker SIGKILL | 3000 | 2699 | 300 | 1 | 0 (no bound) | **stalled** |",
		"| DLQ write failure | 3000 | 2700 | 300 | 0 | 0 (no bound) | 1.20 s (≤ 5.00 s) | 5.00 s | – | – | ok |",
		"| worker SIGKILL | 300 | 0 | 0 | 0 | 0 (no bound) | n/a (the killed worker held no delivery) |",
		`a string \| in its place`, "| Redis | retry_after=5 |",
		"| connection blackhole, never healed | 3000 | 2700 | 300 | 0 | 0 (no bound) | 2.00 s (≤ 15.0 s) | 5.00 s | 3.20 s (≤ 10.0 s) | – | ok |",
		"| Redis | connection blackhole, never healed | 3.20 s (≤ 10.0 s) | from the freeze until worker 2 saw a failed receive |",
		"| Kafka | connection blackhole | – (≤ 10.0 s) | workers 0, 1 saw no failure before the thaw |",
		"| 1 | 0 (no bound) | **stalled** | 0 s | – | – | **fails**: 1 messages missing (stream numbers []); stalled: from the SIGKILL |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	// A table per broker, by name; its rows in the order of Scenarios.
	k, r, r1, r2 := strings.Index(table, "**Kafka**"), strings.Index(table, "**Redis**"), strings.Index(table, "| worker SIGKILL | 3000 | 2699"),
		strings.Index(table, "| DLQ write failure")
	if !(k >= 0 && k < r && r < r1 && r1 < r2) {
		t.Errorf("tables or rows out of order:\n%s", table)
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
		"| 0 (1 publishes in the cut, 1 returned nil; longest 5.85 s) | ok |",
		"| 1 (2 publishes in the cut, 1 returned nil; longest 5.58 s) | **fails**: 1 publishes failed through a cut of 5s (each with a 30s context), the first with: read: connection reset by peer |",
		"| not cut: its clients connect where a lookup sends them | ok |",
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

// A run with more duplicates than its binding's documented bound fails, within the
// form's slack, and says which row; one without a stated bound is not judged on them.
func TestDuplicateBound(t *testing.T) {
	over := &Result{Broker: "Kafka", Scenario: Cut, Form: "full", Duplicates: 1300, DuplicateBound: 1128, DuplicateBoundOf: "4 × 282"}
	if f := over.Failures(1); len(f) != 1 || f[0] != "1300 duplicates, past the documented bound of 1128 (4 × 282)" {
		t.Errorf("1300 duplicates, bound 1128: %q", f)
	}
	if f := over.Failures(2); len(f) != 0 {
		t.Errorf("1300 duplicates within twice a bound of 1128: %q", f)
	}
	within := &Result{Broker: "Redis", Scenario: Kill, Form: "short", Duplicates: 2, DuplicateBound: 2}
	none := &Result{Broker: "Redis", Scenario: DLQFailure, Duplicates: 40}
	if f := append(within.Failures(1), none.Failures(1)...); len(f) != 0 {
		t.Errorf("at the bound, or without one: %q", f)
	}
	short := &Result{Broker: "Pulsar", Scenario: Kill, Form: "short", Duplicates: 5, DuplicateBound: 2, DuplicateBoundOf: "1 × 2"}
	got := OverBound([]*Result{within, over, none, short})
	want := []string{"Kafka, connection cut: 1300 duplicates, past the documented bound of 1128 (4 × 282)",
		"Pulsar, worker SIGKILL: 5 duplicates, past 4, 2 times the documented bound of 2 (1 × 2)"}
	if !slices.Equal(got, want) {
		t.Errorf("OverBound = %q, want %q", got, want)
	}
	table := Markdown([]*Result{over, within})
	for _, w := range []string{"| 1300 (≤ 1128) |", "**fails**: 1300 duplicates, past the documented bound of 1128", "| 2 (≤ 2) |"} {
		if !strings.Contains(table, w) {
			t.Errorf("the table lacks %q:\n%s", w, table)
		}
	}
}

// A run of a few brokers or scenarios replaces their rows and keeps the others'.
func TestMergeResults(t *testing.T) {
	old := []*Result{{Broker: "Redis", Scenario: Kill, Published: 1}, {Broker: "Pulsar", Scenario: Kill, Published: 1},
		{Broker: "Pulsar", Scenario: Cut, Published: 1}, {Broker: "Redis", Setup: "Sentinel", Case: "primary SIGKILL", Scenario: Restart, Published: 1}}
	newer := []*Result{{Broker: "Pulsar", Scenario: Cut, Published: 2}, {Broker: "Pulsar", Scenario: Blackhole, Published: 2}}
	var got []string
	for _, r := range MergeResults(old, newer) {
		got = append(got, fmt.Sprintf("%s/%s/%d", r.Title(), r.Row(), r.Published))
	}
	want := []string{"Pulsar/worker SIGKILL/1", "Pulsar/connection cut/2", "Pulsar/connection blackhole/2",
		"Redis/worker SIGKILL/1", "Redis (Sentinel)/primary SIGKILL/1"}
	if !slices.Equal(got, want) {
		t.Errorf("MergeResults = %q, want %q", got, want)
	}
	if old[2].Published != 1 || len(old) != 4 {
		t.Error("MergeResults changed old")
	}
}

// A cluster test's results get a table of their own, named by their setup, their rows
// by their case.
func TestClusterRows(t *testing.T) {
	single := &Result{Broker: "Redis", Scenario: Kill, Published: 300}
	sentinel := &Result{Broker: "Redis", Setup: "Sentinel, wait=1", Scenario: Restart, Case: "primary SIGKILL", Published: 3000, Bound: 8 * time.Second}
	table := Markdown([]*Result{sentinel, single})
	for _, w := range []string{"**Redis**\n", "**Redis (Sentinel, wait=1)**\n", "| primary SIGKILL | 3000 |", "| Redis (Sentinel, wait=1) | primary SIGKILL |"} {
		if !strings.Contains(table, w) {
			t.Errorf("the table lacks %q:\n%s", w, table)
		}
	}
	if strings.Index(table, "**Redis**") > strings.Index(table, "**Redis (Sentinel") {
		t.Errorf("the single broker's table comes after its cluster's:\n%s", table)
	}
	// Its test's verdict, not the engine's bounds: a pause of its own, a Sentinel
	// without wait whose losses are counted, not failed.
	sentinel.Judged, sentinel.Missing, sentinel.Recovery = true, 1, time.Minute
	if got := OverBound([]*Result{sentinel}); len(got) != 0 {
		t.Errorf("a run its test passed is over its bounds: %q", got)
	}
	sentinel.Failed = true
	if got := OverBound([]*Result{sentinel}); len(got) != 1 || !strings.HasPrefix(got[0], "Redis (Sentinel, wait=1), primary SIGKILL: failed by its test") {
		t.Errorf("a run its test failed: %q", got)
	}
}
