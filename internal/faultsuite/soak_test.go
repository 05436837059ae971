package faultsuite

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

func seconds7() []float64 { return []float64{30, 40, 50, 60, 70, 80, 90} }

func TestTrendJudgesGrowthNotScatter(t *testing.T) {
	for _, tc := range []struct {
		name string
		y    []float64
		ok   bool
	}{
		{"flat", []float64{100, 100, 100, 100, 100, 100, 100}, true},
		// A p99 of a busy machine: two to three times from one window to the next, no trend.
		{"scatter without a trend", []float64{170, 123, 208, 66, 345, 162, 190}, true},
		// One bad last window: the first sample against the last says +200 %.
		{"one bad last sample", []float64{100, 101, 99, 100, 102, 100, 300}, true},
		{"shrinking", []float64{120, 115, 110, 105, 100, 95, 90}, true},
		// A leak: 1 % a window, 6 % over the judged minute: under the limit.
		{"slow growth under the limit", []float64{100, 101, 102, 103, 104, 105, 106}, true},
		// A leak of 3 % a window with a little scatter: 18 % over the minute.
		{"growth past the limit", []float64{100, 104, 105, 110, 111, 116, 118}, false},
		{"a leak in a noisy measure", []float64{100, 140, 130, 180, 170, 220, 210}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := TrendOf(seconds7(), tc.y, 0.10)
			if tr.OK != tc.ok {
				t.Errorf("OK = %v, want %v (growth %+.1f%%, at least %+.1f%%, fitted %.1f → %.1f)",
					tr.OK, tc.ok, 100*tr.Growth, 100*tr.GrowthLow, tr.First, tr.Last)
			}
			if tr.GrowthLow > tr.Growth+1e-9 {
				t.Errorf("the lower bound %+.3f is above the growth %+.3f", tr.GrowthLow, tr.Growth)
			}
			if tr.RawFirst != tc.y[0] || tr.RawLast != tc.y[len(tc.y)-1] {
				t.Errorf("raw %v → %v, want the first and last samples", tr.RawFirst, tr.RawLast)
			}
		})
	}
}

func TestTrendOfALineIsItsGrowth(t *testing.T) {
	x := seconds7()
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = 1000 + 10*(v-30) // 1000 → 1600: +60 %
	}
	tr := TrendOf(x, y, 0.10)
	if math.Abs(tr.Growth-0.6) > 1e-9 || math.Abs(tr.GrowthLow-0.6) > 1e-9 || tr.First != 1000 || tr.Last != 1600 || tr.OK {
		t.Errorf("TrendOf(a line) = %+v, want 1000 → 1600, growth and bound 0.6, not OK", tr)
	}
	// Two samples: no scatter to judge, the bound is the growth.
	tr = TrendOf([]float64{0, 60}, []float64{10, 12}, 0.10)
	if math.Abs(tr.Growth-0.2) > 1e-9 || tr.GrowthLow != tr.Growth || tr.OK {
		t.Errorf("TrendOf(two samples) = %+v, want growth 0.2, not OK", tr)
	}
	// From nothing to something is growth past any limit.
	if tr := TrendOf([]float64{0, 1, 2}, []float64{0, 1, 2}, 0.10); tr.OK || !math.IsInf(tr.Growth, 1) {
		t.Errorf("TrendOf(0, 1, 2) = %+v, want an infinite growth", tr)
	}
}

func TestTrendsNeedTwoSamplesAndJudgeEveryMeasure(t *testing.T) {
	if got := Trends([]SoakSample{{End: time.Minute}}, 0.1); got != nil {
		t.Errorf("Trends of one sample = %+v, want none", got)
	}
	var samples []SoakSample
	for k := range 5 {
		samples = append(samples, SoakSample{End: time.Duration(k+1) * time.Minute, RSS: 20 << 20, HeapLive: 1 << 20,
			Goroutines: 30, FDs: float64(10 + 3*k), P99: 5 * time.Millisecond})
	}
	got := Trends(samples, 0.1)
	var measures []string
	for _, tr := range got {
		measures = append(measures, tr.Measure)
		if want := tr.Measure != MeasureFDs; tr.OK != want {
			t.Errorf("%s: OK = %v, want %v (%+v)", tr.Measure, tr.OK, want, tr)
		}
	}
	if strings.Join(measures, ",") != strings.Join([]string{MeasureRSS, MeasureHeap, MeasureGoroutines, MeasureFDs, MeasureP99}, ",") {
		t.Errorf("measures %v", measures)
	}
	res := &SoakResult{Trends: got, MaxGrowth: 0.1}
	if f := res.Failures(); len(f) != 1 || !strings.Contains(f[0], MeasureFDs) {
		t.Errorf("Failures = %q, want the descriptors' growth alone", f)
	}
}

func TestPercentileByNearestRank(t *testing.T) {
	v := make([]int64, 100)
	for i := range v {
		v[i] = int64(i + 1)
	}
	for q, want := range map[float64]int64{0.5: 50, 0.99: 99, 1: 100, 0.001: 1} {
		if got := Percentile(v, q); got != want {
			t.Errorf("Percentile(1..100, %v) = %d, want %d", q, got, want)
		}
	}
	if got := Percentile([]int64{7}, 0.99); got != 7 {
		t.Errorf("Percentile([7], 0.99) = %d", got)
	}
	if got := Percentile(nil, 0.5); got != 0 {
		t.Errorf("Percentile(nil) = %d", got)
	}
}

func TestSummarizeWindowTakesMedians(t *testing.T) {
	rs := []reading{
		{rss: 10, fds: 5, rt: Runtime{HeapLive: 1, HeapObjects: 9, Goroutines: 20}},
		{rss: 30, fds: 6, rt: Runtime{HeapLive: 3, HeapObjects: 2, Goroutines: 90}}, // a burst of goroutines
		{rss: 20, fds: 5, rt: Runtime{HeapLive: 2, HeapObjects: 5, Goroutines: 21}},
	}
	sm := summarizeWindow(rs, []int64{5, 1, 3, 2, 4})
	if sm.RSS != 20 || sm.FDs != 5 || sm.HeapLive != 2 || sm.HeapObjects != 5 || sm.Goroutines != 21 || sm.Readings != 3 {
		t.Errorf("medians %+v", sm)
	}
	if sm.P50 != 3 || sm.P99 != 5 || sm.Latencies != 5 {
		t.Errorf("latencies p50 %d, p99 %d of %d", sm.P50, sm.P99, sm.Latencies)
	}
}

func TestSoakPlanMix(t *testing.T) {
	p := ShortSoak()
	count := map[string]int{}
	for n := range 100 {
		count[p.urn(n)]++
	}
	if count[URNFail] != 10 || count[URNFlaky] != 10 || count[URNGood] != 80 {
		t.Errorf("the mix of 100 messages: %v, want 10 failing, 10 flaky, 80 good", count)
	}
}

// A soak run's books, by stream number: every message handled or dead-lettered once
// makes it complete; a second handling or dead letter is a duplicate; an event of a
// message not published, or with another meta.id, and a good message dead-lettered
// are counted; only first deliveries' latencies are kept.
func TestTallyAccountsForEveryMessage(t *testing.T) {
	p := ShortSoak() // message 4 is flaky, 9 fails
	l := newTally("q", p)
	id := func(n int) string { return fmt.Sprintf("id-%d", n) }
	for n := range 10 {
		l.Published(id(n), n, n == 9)
	}
	for n := range 9 {
		if n == 4 {
			l.Apply(Event{Ev: EvTried, ID: id(4), N: 4, Lat: 40})
			l.Apply(Event{Ev: EvHandled, ID: id(4), N: 4, Attempts: 1, Lat: 4000})
			continue
		}
		l.Apply(Event{Ev: EvHandled, ID: id(n), N: n, Lat: int64(10 + n)})
	}
	for a := range 3 {
		l.Apply(Event{Ev: EvTried, ID: id(9), N: 9, Attempts: a, Lat: 90})
	}
	if l.complete() || l.outstanding() != 1 {
		t.Fatalf("complete before message 9 was dead-lettered (outstanding %d)", l.outstanding())
	}
	l.DeadLetter(deadLetterBody(id(9), "q", "failed", 9))
	if !l.complete() {
		t.Fatal("not complete with every message handled or dead-lettered")
	}
	lats, fin := l.takeWindow()
	if len(lats) != 10 || fin != 10 {
		t.Errorf("window: %d latencies (want the 10 first deliveries), %d finished (want 10)", len(lats), fin)
	}
	for _, v := range lats {
		if v == 4000 {
			t.Error("the flaky message's retry counted as a first delivery")
		}
	}

	l.Apply(Event{Ev: EvHandled, ID: id(2), N: 2, Attempts: 0})          // a duplicate
	l.DeadLetter(deadLetterBody(id(9), "q", "failed", 9))                // a duplicate
	l.Apply(Event{Ev: EvHandled, ID: id(11), N: 11})                     // never published
	l.Apply(Event{Ev: EvHandled, ID: "another", N: 3})                   // not message 3's meta.id
	l.DeadLetter(deadLetterBody(id(5), "q", "failed", 5))                // a good message dead-lettered
	l.Apply(Event{Ev: EvSettled, Action: "dead_letter", Err: "refused"}) // a failed settlement
	res := &SoakResult{}
	l.fill(res)
	if res.Published != 10 || res.Handled != 9 || res.DeadLettered != 1 || res.Missing != 0 || res.Duplicates != 2 || res.Flaky != 1 {
		t.Errorf("books %+v", res)
	}
	if res.FailedSettles["dead_letter"] != 1 {
		t.Errorf("failed settlements %v", res.FailedSettles)
	}
	problems := strings.Join(res.Problems, "\n")
	for _, want := range []string{"message 3 reported with meta.id another", "message 5 (" + URNGood + ") was dead-lettered", "1 events or dead letters of messages the run never published"} {
		if !strings.Contains(problems, want) {
			t.Errorf("problems lack %q:\n%s", want, problems)
		}
	}

	// A message never finished is missing, with its number.
	l.Published(id(10), 10, false)
	res = &SoakResult{}
	l.fill(res)
	if res.Missing != 1 || len(res.MissingN) != 1 || res.MissingN[0] != 10 {
		t.Errorf("missing %d %v, want message 10", res.Missing, res.MissingN)
	}
	if f := res.Failures(); len(f) == 0 || !strings.Contains(f[0], "1 messages missing") {
		t.Errorf("Failures = %q", f)
	}
}

// A quiet worker reports its handlers' events with their latency, not every reception
// and settlement; a flaky message fails once and is handled on its retry; a sample
// command is answered with the runtime's figures.
func TestQuietWorkerReportsHandlersLatencyAndSamples(t *testing.T) {
	tr := memory.New()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := babelqueue.New(tr, babelqueue.WithQueue("q"))
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now().UnixNano()
	for n, urn := range []string{URNGood, URNFlaky, URNFail} {
		if _, err := pub.Publish(ctx, urn, Payload{N: n, At: sent}); err != nil {
			t.Fatal(err)
		}
	}
	open := func(context.Context, WorkerSpec) (transport.Transport, Switch, error) { return tr, nil, nil }
	in, cmds := io.Pipe()
	out := &syncBuffer{}
	spec := WorkerSpec{Broker: "memory", URL: "memory://", Queue: "q", Concurrency: 2, MaxAttempts: 3, Quiet: true}
	done := make(chan error, 1)
	go func() { done <- runWorker(ctx, spec, open, in, out, slog.New(slog.DiscardHandler)) }()
	waitFor := func(what string, ok func(Event) bool) {
		t.Helper()
		for ctx.Err() == nil {
			for _, ev := range out.events(t) {
				if ok(ev) {
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("no %s in %+v", what, out.events(t))
	}
	waitFor("third try of the failing message", func(ev Event) bool { return ev.Ev == EvTried && ev.N == 2 && ev.Attempts == 2 })
	waitFor("the flaky message handled", func(ev Event) bool { return ev.Ev == EvHandled && ev.N == 1 })
	if _, err := io.WriteString(cmds, cmdSample+"\n"); err != nil {
		t.Fatal(err)
	}
	waitFor("sample", func(ev Event) bool { return ev.Ev == EvSample })
	if _, err := io.WriteString(cmds, cmdStop+"\n"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("runWorker: %v", err)
	}
	elapsed := time.Now().UnixNano() - sent
	for _, ev := range out.events(t) {
		switch ev.Ev {
		case EvReceived, EvSettled:
			t.Errorf("a quiet worker reported %+v", ev)
		case EvHandled, EvTried:
			if ev.Lat <= 0 || ev.Lat > elapsed {
				t.Errorf("%s of %d: latency %d, want within the %d ns since the publish", ev.Ev, ev.N, ev.Lat, elapsed)
			}
			if ev.N == 1 && (ev.Ev == EvHandled) != (ev.Attempts == 1) {
				t.Errorf("the flaky message: %s at attempts %d", ev.Ev, ev.Attempts)
			}
		case EvSample:
			if ev.Rt == nil || ev.Rt.Goroutines == 0 || ev.Rt.HeapObjects == 0 || ev.Rt.Total < ev.Rt.HeapObjects {
				t.Errorf("sample %+v", ev.Rt)
			}
		}
	}
}

// A latency trend the form reports but does not judge is shown in the report and does
// not fail the run; the same trend judged does.
func TestReportedTrendDoesNotFailTheRun(t *testing.T) {
	grew := Trend{Measure: MeasureP99, First: 0.017e9, Last: 0.053e9, Growth: 1.97, GrowthLow: 0.36}
	judged := &SoakResult{Trends: []Trend{grew}, MaxGrowth: 0.1}
	if f := judged.Failures(); len(f) != 1 || !strings.Contains(f[0], MeasureP99) {
		t.Errorf("judged: Failures = %q, want the p99 growth", f)
	}
	grew.Reported = true
	reported := &SoakResult{Trends: []Trend{grew}, MaxGrowth: 0.1}
	if f := reported.Failures(); len(f) != 0 {
		t.Errorf("reported only: Failures = %q, want none", f)
	}
	if ShortSoak().JudgeLatency || !LongSoak().JudgeLatency {
		t.Errorf("JudgeLatency: short %v, long %v; want the long form alone to judge latency", ShortSoak().JudgeLatency, LongSoak().JudgeLatency)
	}
}
