package faultsuite

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// SoakPlan is the shape of a soak run (issue 39): one worker process, the runtime as a
// user runs it, consumes a steady stream at a fraction of the peak the run measured
// first, with a failure mix, while the run samples the worker's resident memory, Go
// heap, goroutines, open descriptors and end-to-end latency, and afterwards accounts
// for every message.
type SoakPlan struct {
	// Calibrate is how long the peak is measured, before the steady stream: messages are
	// published as fast as the publishers go while no more than Backlog of them are
	// unfinished, and the peak is the messages finished per second over the last two
	// thirds of it (the first third fills the pipeline).
	Calibrate time.Duration
	Backlog   int
	// Fraction of the peak is the steady stream's rate; Rate, when above zero, is the
	// rate itself (in messages per second) and no peak is measured.
	Fraction float64
	Rate     float64
	// Duration is how long the steady stream lasts; its first Warmup is not judged.
	Duration, Warmup time.Duration
	// Window is the span of one sample; Tick the pace of the readings whose median a
	// sample holds.
	Window, Tick time.Duration
	// Message n fails always when (n+1)%FailEvery == 0 (dead-lettered after MaxAttempts
	// tries), and fails once, then is handled on the retry, when (n+1)%FlakyEvery ==
	// FlakyEvery/2 (FlakyEvery zero: never).
	FailEvery, FlakyEvery, MaxAttempts int
	// Concurrency is the worker's runtime goroutines (WithConcurrency); Publishers the
	// run's publishing goroutines.
	Concurrency, Publishers int
	// Drain bounds each wait for every message published so far to be accounted for
	// (after the peak's measure, after the stream); Linger is the wait after that for
	// late duplicates.
	Drain, Linger time.Duration
	// MaxGrowth is the growth a measure may show from the first judged sample to the
	// last (see Trend).
	MaxGrowth float64
	// JudgeLatency makes the p99 latency's trend a failure like the others. Without it
	// the trend is reported only: latency is a timing, and seven samples of a shared
	// machine in 90 seconds tell another program's load from the runtime's own too
	// rarely to gate a build on (the short form runs in make test, where no timing is
	// asserted). Memory, goroutines and descriptors are judged in every form.
	JudgeLatency bool
}

// ShortSoak is the short form (make test): 10 s to measure the peak, then 90 s at half
// of it, of which 20 s are warm-up, sampled every 10 s (seven judged samples). Its p99
// latency is reported, not judged (see SoakPlan.JudgeLatency).
func ShortSoak() SoakPlan {
	return SoakPlan{Calibrate: 10 * time.Second, Backlog: 1000, Fraction: 0.5,
		Duration: 90 * time.Second, Warmup: 20 * time.Second, Window: 10 * time.Second, Tick: time.Second,
		FailEvery: 10, FlakyEvery: 10, MaxAttempts: 3, Concurrency: 8, Publishers: 16,
		Drain: 20 * time.Second, Linger: time.Second, MaxGrowth: 0.10}
}

// LongSoak is the long form (make soak): 30 s to measure the peak, then 30 minutes at
// half of it, of which 5 are warm-up, sampled every minute; its p99 latency is judged.
func LongSoak() SoakPlan {
	p := ShortSoak()
	p.Calibrate, p.Duration, p.Warmup, p.Window = 30*time.Second, 30*time.Minute, 5*time.Minute, time.Minute
	p.Drain, p.Linger = time.Minute, 2*time.Second
	p.JudgeLatency = true
	return p
}

// urn is the URN of message n of the stream.
func (p SoakPlan) urn(n int) string {
	switch {
	case p.FailEvery > 0 && (n+1)%p.FailEvery == 0:
		return URNFail
	case p.FlakyEvery > 0 && (n+1)%p.FlakyEvery == p.FlakyEvery/2:
		return URNFlaky
	}
	return URNGood
}

// The measures a soak run judges, in the order of its report.
const (
	MeasureRSS        = "RSS"
	MeasureHeap       = "Go heap (live)"
	MeasureGoroutines = "goroutines"
	MeasureFDs        = "open descriptors"
	MeasureP99        = "p99 latency"
)

// SoakSample is one window of the steady stream. Each of the worker's figures is the
// median of the readings taken every tick of the window; the latencies are those of
// every first delivery whose handler started in it (its publish to its handler's start).
type SoakSample struct {
	// End is how far into the steady stream the window ended; Warmup says it ended
	// within the warm-up.
	End    time.Duration `json:"end_ns"`
	Warmup bool          `json:"warmup,omitempty"`
	// Readings is how many readings the medians are of.
	Readings    int     `json:"readings"`
	RSS         float64 `json:"rss_bytes"`
	HeapLive    float64 `json:"heap_live_bytes"`
	HeapObjects float64 `json:"heap_objects_bytes"`
	GoTotal     float64 `json:"go_total_bytes"`
	Goroutines  float64 `json:"goroutines"`
	FDs         float64 `json:"fds"`
	// Latencies is how many first deliveries the percentiles are of.
	Latencies int           `json:"latencies"`
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	// Published and Finished are the messages published, and finished (handled, or
	// read from the dead-letter queue), in the window.
	Published int `json:"published"`
	Finished  int `json:"finished"`
}

// value returns the sample's figure of measure m.
func (s SoakSample) value(m string) float64 {
	switch m {
	case MeasureRSS:
		return s.RSS
	case MeasureHeap:
		return s.HeapLive
	case MeasureGoroutines:
		return s.Goroutines
	case MeasureFDs:
		return s.FDs
	case MeasureP99:
		return float64(s.P99)
	}
	return math.NaN()
}

// Trend is how a measure moved over the judged samples (those after the warm-up).
//
// Its growth is that of a line fitted through them with the Theil–Sen estimator: the
// slope is the median of the slopes between every pair of samples, the intercept the
// median of each sample's value less slope × its time. First and Last are that line at
// the first judged sample and at the last; Growth is (Last − First) / First.
// GrowthLow is the same growth with the slope's one-sided 95 % lower confidence bound
// (Sen 1968: the slope of rank ⌊(N − C)/2⌋ among the N pairwise slopes, C = 1.645 ×
// √(n(n−1)(2n+5)/18) for n samples): the growth the samples show beyond their scatter.
// The measure is flat (OK) when GrowthLow is at most the limit.
//
// Why this holds up against noise: each sample is itself a median (of a window's
// readings, one a tick) or a percentile of thousands of latencies, so a
// garbage-collection cycle, a reconnection's goroutines or an instant in which the
// machine was busy moves a sample little; the median of the pairwise slopes ignores
// samples that are off altogether (a minute in which another program took the CPU),
// where the first sample against the last would judge two readings alone; and the
// bound asks that most pairs of samples rise, not one. A measure that keeps growing
// (a leak) moves every pair, so its bound is its growth: for memory, goroutines and
// descriptors, which scatter little, the bound and the fitted growth are the same
// figure; the p99 latency of a shared machine scatters by tens of percent from one
// window to the next, and there the bound is what tells a trend from the scatter.
// RawFirst and RawLast are the first and last judged samples themselves.
type Trend struct {
	Measure   string  `json:"measure"`
	First     float64 `json:"first"`
	Last      float64 `json:"last"`
	Growth    float64 `json:"growth"`
	GrowthLow float64 `json:"growth_low"`
	RawFirst  float64 `json:"raw_first"`
	RawLast   float64 `json:"raw_last"`
	OK        bool    `json:"ok"`
	// Reported marks a trend shown but not judged: its OK does not fail the run
	// (the short form's p99 latency; see SoakPlan.JudgeLatency).
	Reported bool `json:"reported_only,omitempty"`
}

// SoakResult is the account of one soak run.
type SoakResult struct {
	Broker string `json:"broker"`
	// Form is "short" or "long".
	Form  string `json:"form,omitempty"`
	Queue string `json:"queue"`
	// Peak is the messages finished per second measured before the stream (0 when the
	// rate was given); Rate is the steady stream's rate, Achieved what the publishers
	// kept up after the warm-up.
	Peak     float64 `json:"peak"`
	Rate     float64 `json:"rate"`
	Achieved float64 `json:"achieved"`

	Published      int            `json:"published"`
	Handled        int            `json:"handled"`
	DeadLettered   int            `json:"dead_lettered"`
	Missing        int            `json:"missing"`
	Duplicates     int            `json:"duplicates"`
	Flaky          int            `json:"flaky_handled_on_retry"`
	PublishRetries int            `json:"publish_retries,omitempty"`
	FailedSettles  map[string]int `json:"failed_settles,omitempty"`
	ReceiveErrors  int            `json:"receive_errors,omitempty"`
	MissingN       []int          `json:"missing_n,omitempty"`

	Samples   []SoakSample `json:"samples"`
	Trends    []Trend      `json:"trends"`
	MaxGrowth float64      `json:"max_growth"`

	Settings string   `json:"settings,omitempty"`
	Problems []string `json:"problems,omitempty"`
	Notes    []string `json:"notes,omitempty"`
	Started  string   `json:"started"`
	Elapsed  float64  `json:"elapsed_s"`
}

// Failures returns what makes the run fail: a message missing, a measure that grew
// past MaxGrowth, too few samples to judge, and every problem. Duplicates do not:
// delivery is at least once.
func (res *SoakResult) Failures() []string {
	var out []string
	if res.Missing > 0 {
		out = append(out, fmt.Sprintf("%d messages missing (stream numbers %v)", res.Missing, res.MissingN))
	}
	if len(res.Trends) == 0 {
		out = append(out, "fewer than two samples after the warm-up: nothing to judge")
	}
	for _, t := range res.Trends {
		if !t.OK && !t.Reported {
			out = append(out, fmt.Sprintf("%s grew %+.1f%% after the warm-up, at least %+.1f%% (95 %% bound), past %.0f%% (fitted %s → %s; samples %s → %s)",
				t.Measure, 100*t.Growth, 100*t.GrowthLow, 100*res.MaxGrowth, format(t.Measure, t.First), format(t.Measure, t.Last),
				format(t.Measure, t.RawFirst), format(t.Measure, t.RawLast)))
		}
	}
	return append(out, res.Problems...)
}

// Soak runs plan p on b: it starts one worker process, measures the peak (unless p.Rate
// is set), publishes the steady stream while sampling the worker, waits until every
// message is accounted for, and returns the account. Its error is about the run itself;
// what the account says is for the caller to judge ([SoakResult.Failures]).
func Soak(ctx context.Context, b *Binding, p SoakPlan, env Env) (*SoakResult, error) {
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	s := &soak{
		run: run{b: b, env: env, queue: "bqsoak-" + hex.EncodeToString(suffix[:]), quiet: true,
			p: Plan{Workers: 1, Concurrency: p.Concurrency, MaxAttempts: p.MaxAttempts, FailEvery: p.FailEvery}},
		plan: p,
	}
	s.tally = newTally(s.queue, p)
	s.acct = s.tally
	s.observe = s.reading
	return s.soak(ctx)
}

type soak struct {
	run
	plan  SoakPlan
	tally *tally
	next  atomic.Int64 // the stream number of the next message

	rmu      sync.Mutex
	readings []reading
	procErr  error
}

// reading is one look at the worker: from /proc and from its runtime.
type reading struct {
	rss, fds uint64
	rt       Runtime
}

// reading records a sample event's figures with the process's own, read at once.
func (s *soak) reading(p *proc, ev Event) {
	if ev.Ev != EvSample || ev.Rt == nil {
		return
	}
	rss, fds, err := procStats(p.cmd.Process.Pid)
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if err != nil {
		s.procErr = err
		return
	}
	s.readings = append(s.readings, reading{rss: rss, fds: fds, rt: *ev.Rt})
}

func (s *soak) takeReadings() []reading {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	out := s.readings
	s.readings = nil
	return out
}

func (s *soak) soak(ctx context.Context) (*SoakResult, error) {
	started := time.Now()
	logf, err := os.Create(filepath.Join(s.env.Dir, s.queue+"-run.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.log = slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tctx := transport.ContextWithLogger(ctx, s.log)
	if load := loadAverage(); load != "" {
		s.notef("load average at the start: %s", load)
	}

	pub, err := transport.Open(tctx, s.b.URL(RolePublisher, s.queue))
	if err != nil {
		return nil, fmt.Errorf("open the publisher: %w", err)
	}
	defer closeTransport(pub)
	app, err := babelqueue.New(pub, babelqueue.WithQueue(s.queue), babelqueue.WithDeadLetter(true), babelqueue.WithLogger(s.log))
	if err != nil {
		return nil, err
	}
	s.dlq = app.DeadLetterQueue()
	if s.b.Prepare != nil {
		if err := s.b.Prepare(ctx, s.queue, s.dlq); err != nil {
			return nil, fmt.Errorf("prepare %s: %w", s.queue, err)
		}
	}
	rd, err := transport.Open(tctx, s.b.URL(RoleReader, s.queue))
	if err != nil {
		return nil, fmt.Errorf("open the dead-letter reader: %w", err)
	}
	defer closeTransport(rd)
	rctx, stopReader := context.WithCancel(ctx)
	readerDone := make(chan struct{})
	go func() { defer close(readerDone); s.readDLQ(rctx, rd) }()
	defer func() { stopReader(); <-readerDone }()

	defer s.killAll()
	w, err := s.startWorker(ctx)
	if err != nil {
		return nil, err
	}

	res := &SoakResult{Broker: s.b.Name, Queue: s.queue, Rate: s.plan.Rate, MaxGrowth: s.plan.MaxGrowth,
		Settings: s.b.Settings, Started: started.UTC().Format(time.RFC3339)}
	if res.Rate <= 0 {
		if res.Peak, err = s.calibrate(ctx, pub, app); err != nil {
			return nil, err
		}
		res.Rate = s.plan.Fraction * res.Peak
		if res.Rate < 1 {
			return nil, fmt.Errorf("the peak measured was %.1f messages/s: nothing to run at %.0f%% of it", res.Peak, 100*s.plan.Fraction)
		}
	}
	s.tally.takeWindow() // the peak's latencies are no sample's
	s.takeReadings()

	if res.Samples, err = s.stream(ctx, pub, app, w, res.Rate); err != nil {
		return nil, err
	}
	if !s.drain(ctx) {
		s.notef("not every message was accounted for %s after the last publish", s.plan.Drain)
	} else {
		sleep(ctx, s.plan.Linger)
	}
	drained := time.Now()
	s.stopWorkers()
	stopReader()
	<-readerDone

	s.rmu.Lock()
	if s.procErr != nil {
		s.tally.Problem("reading the worker's /proc: %v", s.procErr)
	}
	s.rmu.Unlock()
	if w.exitErr != nil {
		s.tally.Problem("the worker exited with %v; its log: %s", w.exitErr, tail(w.logPath, 1500))
	}
	s.tally.fill(res)
	var judged []SoakSample
	for _, sm := range res.Samples {
		if !sm.Warmup {
			judged = append(judged, sm)
		}
	}
	if len(judged) > 0 {
		published := 0
		for _, sm := range judged {
			published += sm.Published
		}
		res.Achieved = float64(published) / (time.Duration(len(judged)) * s.plan.Window).Seconds()
		if res.Achieved < 0.9*res.Rate {
			s.notef("the publishers kept up %.0f messages/s of the %.0f asked after the warm-up", res.Achieved, res.Rate)
		}
	}
	res.Trends = Trends(judged, s.plan.MaxGrowth)
	for i := range res.Trends {
		if res.Trends[i].Measure == MeasureP99 && !s.plan.JudgeLatency {
			res.Trends[i].Reported = true
		}
	}
	if load := loadAverage(); load != "" {
		s.notef("load average at the end: %s", load)
	}
	s.mu.Lock()
	res.Notes = slices.Clone(s.notes)
	s.mu.Unlock()
	res.Elapsed = drained.Sub(started).Round(100 * time.Millisecond).Seconds()
	return res, nil
}

// publishers runs the run's publishers until each of them returns false from take (a
// message's number and when to publish it), and returns the first error.
func (s *soak) publishers(ctx context.Context, pub transport.Transport, app *babelqueue.App, take func() (n int, at time.Time, ok bool)) error {
	var wg sync.WaitGroup
	errs := make(chan error, s.plan.Publishers)
	for range s.plan.Publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n, at, ok := take()
				if !ok {
					return
				}
				sleep(ctx, time.Until(at))
				if err := s.publishAs(ctx, pub, app, n, s.plan.urn(n)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// calibrate measures the peak: messages finished per second while the publishers keep
// the pipeline full (at most Backlog unfinished), over the last two thirds of
// Calibrate; then it waits until every message is accounted for.
func (s *soak) calibrate(ctx context.Context, pub transport.Transport, app *babelqueue.App) (float64, error) {
	start := time.Now()
	end := start.Add(s.plan.Calibrate)
	take := func() (int, time.Time, bool) {
		for s.tally.outstanding() >= s.plan.Backlog && time.Now().Before(end) && ctx.Err() == nil {
			sleep(ctx, time.Millisecond)
		}
		if !time.Now().Before(end) {
			return 0, time.Time{}, false
		}
		return int(s.next.Add(1) - 1), time.Time{}, true
	}
	done := make(chan error, 1)
	go func() { done <- s.publishers(ctx, pub, app, take) }()
	sleep(ctx, time.Until(start.Add(s.plan.Calibrate/3)))
	f0, t0 := s.tally.finishedCount(), time.Now()
	sleep(ctx, time.Until(end))
	f1, t1 := s.tally.finishedCount(), time.Now()
	if err := <-done; err != nil {
		return 0, fmt.Errorf("publish while measuring the peak: %w", err)
	}
	peak := float64(f1-f0) / t1.Sub(t0).Seconds()
	c := s.tally.counts()
	s.notef("peak: %.0f messages finished/s over the last %s of %s with at most %d unfinished (%d published while measuring)",
		peak, t1.Sub(t0).Round(100*time.Millisecond), s.plan.Calibrate, s.plan.Backlog, c.published)
	if !s.drain(ctx) {
		s.notef("the peak's messages were not all accounted for %s after its measure", s.plan.Drain)
	}
	return peak, ctx.Err()
}

// drain waits until every message published so far is accounted for, at most Drain.
func (s *soak) drain(ctx context.Context) bool {
	deadline := time.Now().Add(s.plan.Drain)
	for !s.tally.complete() && time.Now().Before(deadline) && ctx.Err() == nil {
		sleep(ctx, 50*time.Millisecond)
	}
	return s.tally.complete()
}

// maxLag is how far behind its schedule the steady stream may fall and still catch up.
const maxLag = time.Second

// stream publishes the steady stream at rate for Duration and returns its samples:
// every Tick the worker is asked for a reading, every Window the readings and the
// latencies of the window become a sample.
func (s *soak) stream(ctx context.Context, pub transport.Transport, app *babelqueue.App, w *proc, rate float64) ([]SoakSample, error) {
	start := time.Now()
	end := start.Add(s.plan.Duration)
	every := time.Duration(float64(time.Second) / rate)
	var (
		mu   sync.Mutex
		next = start
	)
	// The pace: message k of the stream is due at start + k × every, and one whose time
	// passed is published at once, so that publishers woken late by a busy machine
	// catch up and the rate holds; after a stall of more than maxLag the time lost
	// beyond it is given up, not caught up in a burst.
	take := func() (int, time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); next.Before(now.Add(-maxLag)) {
			next = now.Add(-maxLag)
		}
		at := next
		if !at.Before(end) {
			return 0, time.Time{}, false
		}
		next = next.Add(every)
		return int(s.next.Add(1) - 1), at, true
	}
	done := make(chan error, 1)
	go func() { done <- s.publishers(ctx, pub, app, take) }()

	var samples []SoakSample
	tick := time.NewTicker(s.plan.Tick)
	defer tick.Stop()
	pub0, fin0 := s.tally.counts().published, s.tally.finishedCount()
	for k := 1; ; k++ {
		wend := start.Add(time.Duration(k) * s.plan.Window)
		if wend.After(end.Add(s.plan.Tick / 2)) {
			break
		}
		for time.Now().Before(wend) && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-tick.C:
				if _, err := io.WriteString(w.stdin, cmdSample+"\n"); err != nil {
					return nil, fmt.Errorf("ask the worker for a reading: %w", err)
				}
			case <-time.After(time.Until(wend)):
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		sleep(ctx, 20*time.Millisecond) // the window's last reading is on its way
		lats, _ := s.tally.takeWindow()
		pub1, fin1 := s.tally.counts().published, s.tally.finishedCount()
		sm := summarizeWindow(s.takeReadings(), lats)
		sm.End = time.Duration(k) * s.plan.Window
		sm.Warmup = sm.End <= s.plan.Warmup
		sm.Published, sm.Finished = pub1-pub0, fin1-fin0
		pub0, fin0 = pub1, fin1
		samples = append(samples, sm)
		if s.env.Logf != nil {
			s.env.Logf("%s %s: %s", s.b.Name, sm.End, sampleLine(sm))
		}
	}
	if err := <-done; err != nil {
		return nil, fmt.Errorf("publish the stream: %w", err)
	}
	return samples, nil
}

// sampleLine is a sample in one line, for the log.
func sampleLine(sm SoakSample) string {
	return fmt.Sprintf("RSS %s, heap %s, %s goroutines, %s fds, p50 %s, p99 %s (%d latencies), %d published, %d finished",
		format(MeasureRSS, sm.RSS), format(MeasureHeap, sm.HeapLive), format(MeasureGoroutines, sm.Goroutines),
		format(MeasureFDs, sm.FDs), format(MeasureP99, float64(sm.P50)), format(MeasureP99, float64(sm.P99)),
		sm.Latencies, sm.Published, sm.Finished)
}

// summarizeWindow makes a sample of a window's readings (the median of each figure)
// and latencies (nanoseconds; their 50th and 99th percentiles).
func summarizeWindow(rs []reading, lats []int64) SoakSample {
	sm := SoakSample{Readings: len(rs), Latencies: len(lats)}
	if len(rs) > 0 {
		med := func(f func(reading) uint64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = float64(f(r))
			}
			return median(v)
		}
		sm.RSS = med(func(r reading) uint64 { return r.rss })
		sm.FDs = med(func(r reading) uint64 { return r.fds })
		sm.HeapLive = med(func(r reading) uint64 { return r.rt.HeapLive })
		sm.HeapObjects = med(func(r reading) uint64 { return r.rt.HeapObjects })
		sm.GoTotal = med(func(r reading) uint64 { return r.rt.Total })
		sm.Goroutines = med(func(r reading) uint64 { return r.rt.Goroutines })
	}
	if len(lats) > 0 {
		slices.Sort(lats)
		sm.P50 = time.Duration(Percentile(lats, 0.50))
		sm.P99 = time.Duration(Percentile(lats, 0.99))
	}
	return sm
}

// Percentile returns the q-th quantile (0 < q ≤ 1) of sorted by the nearest rank: the
// smallest value at or below which at least q of the values lie.
func Percentile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Trends returns the trend of each judged measure over samples (see [Trend]), none
// with fewer than two samples.
func Trends(samples []SoakSample, maxGrowth float64) []Trend {
	if len(samples) < 2 {
		return nil
	}
	x := make([]float64, len(samples))
	for i, sm := range samples {
		x[i] = sm.End.Seconds()
	}
	var out []Trend
	for _, m := range []string{MeasureRSS, MeasureHeap, MeasureGoroutines, MeasureFDs, MeasureP99} {
		y := make([]float64, len(samples))
		for i, sm := range samples {
			y[i] = sm.value(m)
		}
		t := TrendOf(x, y, maxGrowth)
		t.Measure = m
		out = append(out, t)
	}
	return out
}

// TrendOf fits the Theil–Sen line through the points (x[i], y[i]), x increasing, and
// returns its growth from the first point's x to the last's, with its lower bound,
// judged against maxGrowth (see [Trend]).
func TrendOf(x, y []float64, maxGrowth float64) Trend {
	t := Trend{RawFirst: y[0], RawLast: y[len(y)-1]}
	var slopes []float64
	for i := range x {
		for j := i + 1; j < len(x); j++ {
			if x[j] != x[i] {
				slopes = append(slopes, (y[j]-y[i])/(x[j]-x[i]))
			}
		}
	}
	slices.Sort(slopes)
	slope, low := 0.0, 0.0
	if len(slopes) > 0 {
		slope = median(slopes)
		n := float64(len(x))
		c := 1.645 * math.Sqrt(n*(n-1)*(2*n+5)/18)
		rank := int(math.Floor((float64(len(slopes)) - c) / 2)) // 1-based
		low = slopes[min(max(rank-1, 0), len(slopes)-1)]
	}
	icpt := make([]float64, len(x))
	for i := range x {
		icpt[i] = y[i] - slope*x[i]
	}
	b := median(icpt)
	span := x[len(x)-1] - x[0]
	t.First, t.Last = b+slope*x[0], b+slope*x[len(x)-1]
	growth := func(rise float64) float64 {
		switch {
		case rise <= 0:
			return rise / math.Max(math.Abs(t.First), 1e-9)
		case t.First <= 0:
			return math.Inf(1) // a measure that rose from nothing
		}
		return rise / t.First
	}
	t.Growth, t.GrowthLow = growth(slope*span), growth(low*span)
	t.OK = t.GrowthLow <= maxGrowth
	return t
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// procStats reads a process's resident memory (VmRSS) and its open descriptors.
func procStats(pid int) (rss, fds uint64, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("VmRSS %q: %w", v, err)
			}
			rss = kb << 10
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, 0, err
	}
	return rss, uint64(len(ents)), nil
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes, or "".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// format writes a figure of measure m for a person.
func format(m string, v float64) string {
	switch m {
	case MeasureRSS, MeasureHeap:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case MeasureP99:
		return fmt.Sprintf("%.2f ms", v/1e6)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// tally keeps the books of a soak run by stream number: for each message the hash of
// its meta.id, how often it was handled and how often read from the dead-letter queue
// (16 bytes a message, where a fault run's Ledger keeps every event), and the latencies
// of the first deliveries since the last window. Its methods are safe for concurrent use.
type tally struct {
	queue string
	plan  SoakPlan

	mu        sync.Mutex
	msgs      []slot
	published int
	finished  int // published messages handled (good, flaky) or dead-lettered (failing)
	dups      int // handlings past a message's first, dead letters past the first
	flaky     int // flaky messages handled on their retry
	retries   int
	unknown   int
	problems  map[string]int
	failed    map[string]int
	recvErrs  int
	lats      []int64
	wfinished int // finished at the last takeWindow
}

type slot struct {
	id        uint64 // FNV-1a of meta.id; 0: not published
	handled   uint8  // saturating counts
	dead      uint8
	published bool
}

func newTally(queue string, p SoakPlan) *tally {
	return &tally{queue: queue, plan: p, problems: map[string]int{}, failed: map[string]int{}}
}

// idHash is the 64-bit FNV-1a hash of a meta.id.
func idHash(id string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return h
}

func bump(c *uint8) {
	if *c < math.MaxUint8 {
		*c++
	}
}

// Published records message n with meta.id id.
func (t *tally) Published(id string, n int, failing bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n >= len(t.msgs) {
		t.msgs = append(t.msgs, make([]slot, n+1-len(t.msgs))...)
	}
	s := &t.msgs[n]
	if s.published {
		t.problems[fmt.Sprintf("message %d published twice", n)]++
		return
	}
	if failing != (t.plan.urn(n) == URNFail) {
		t.problems[fmt.Sprintf("message %d published as failing=%v", n, failing)]++
	}
	s.id, s.published = idHash(id), true
	t.published++
}

// Retried records a publish made again with the same bytes.
func (t *tally) Retried() {
	t.mu.Lock()
	t.retries++
	t.mu.Unlock()
}

// Problem records something that must not happen.
func (t *tally) Problem(format string, args ...any) {
	t.mu.Lock()
	t.problems[fmt.Sprintf(format, args...)]++
	t.mu.Unlock()
}

// slotOf returns the slot of message n reported with meta.id id, or nil (counted as
// unknown, or as a problem when the id is not the one published as n). Hold mu.
func (t *tally) slotOf(n int, id string) *slot {
	if n < 0 || n >= len(t.msgs) || !t.msgs[n].published {
		t.unknown++
		return nil
	}
	s := &t.msgs[n]
	if s.id != idHash(id) {
		t.problems[fmt.Sprintf("message %d reported with meta.id %s, not the one it was published with", n, id)]++
		return nil
	}
	return s
}

// Apply records an event a worker reported.
func (t *tally) Apply(ev Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch ev.Ev {
	case EvHandled, EvTried:
		if ev.Attempts == 0 && ev.Lat > 0 {
			t.lats = append(t.lats, ev.Lat)
		}
		s := t.slotOf(ev.N, ev.ID)
		if s == nil {
			return
		}
		urn := t.plan.urn(ev.N)
		switch {
		case ev.Ev == EvHandled && urn == URNFail:
			t.problems[fmt.Sprintf("failing message %d was handled", ev.N)]++
		case ev.Ev == EvHandled:
			if urn == URNFlaky {
				if ev.Attempts == 0 {
					t.problems[fmt.Sprintf("flaky message %d handled on its first delivery", ev.N)]++
				} else if s.handled == 0 {
					t.flaky++
				}
			}
			if s.handled == 0 {
				t.finished++
			} else {
				t.dups++
			}
			bump(&s.handled)
		case urn == URNGood:
			t.problems[fmt.Sprintf("good message %d failed", ev.N)]++
		case urn == URNFlaky && ev.Attempts > 0:
			t.problems[fmt.Sprintf("flaky message %d failed on its retry (attempts %d)", ev.N, ev.Attempts)]++
		case urn == URNFail && ev.Attempts >= t.plan.MaxAttempts:
			t.problems[fmt.Sprintf("failing message %d tried with attempts %d", ev.N, ev.Attempts)]++
		}
	case EvSettled:
		if ev.Kind == string(babelqueue.KindPoison) || ev.Kind == string(babelqueue.KindUnknownURN) {
			t.problems[fmt.Sprintf("a delivery settled as %s (%s)", ev.Kind, ev.Action)]++
		}
		if ev.Err != "" {
			t.failed[ev.Action]++
		}
	case EvRecvErr:
		t.recvErrs++
	}
}

// DeadLetter records a body read from the dead-letter queue: a failing message of the
// run, dead-lettered with reason "failed" from the run's queue, with its handler's error.
func (t *tally) DeadLetter(body []byte) {
	env, err := envelope.Decode(body)
	var p Payload
	if err == nil {
		err = json.Unmarshal(env.Data, &p)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.problems[fmt.Sprintf("a dead letter is not an envelope of the run: %v", err)]++
		return
	}
	s := t.slotOf(p.N, env.Meta.ID)
	switch {
	case s == nil:
		return
	case t.plan.urn(p.N) != URNFail:
		t.problems[fmt.Sprintf("message %d (%s) was dead-lettered", p.N, t.plan.urn(p.N))]++
		return
	case env.DeadLetter == nil:
		t.problems[fmt.Sprintf("failing message %d is in the dead-letter queue without a dead_letter block", p.N)]++
		return
	case env.DeadLetter.Reason != babelqueue.ReasonFailed || env.DeadLetter.OriginalQueue != t.queue ||
		deref(env.DeadLetter.Error) != fmt.Sprintf("refused %d", p.N):
		t.problems[fmt.Sprintf("failing message %d dead-lettered with reason %q from %q, error %q", p.N,
			env.DeadLetter.Reason, env.DeadLetter.OriginalQueue, deref(env.DeadLetter.Error))]++
		return
	}
	if s.dead == 0 {
		t.finished++
	} else {
		t.dups++
	}
	bump(&s.dead)
}

// outstanding is how many published messages are not finished yet.
func (t *tally) outstanding() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.published - t.finished
}

func (t *tally) finishedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.finished
}

// complete reports whether every message published so far is finished.
func (t *tally) complete() bool { return t.outstanding() == 0 }

// takeWindow returns the first deliveries' latencies and the messages finished since
// the last call, and starts a new window.
func (t *tally) takeWindow() ([]int64, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	lats, fin := t.lats, t.finished-t.wfinished
	t.lats, t.wfinished = nil, t.finished
	return lats, fin
}

type tallyCounts struct{ published int }

func (t *tally) counts() tallyCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return tallyCounts{published: t.published}
}

// fill writes the books into res.
func (t *tally) fill(res *SoakResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	res.Published, res.Duplicates, res.Flaky, res.PublishRetries = t.published, t.dups, t.flaky, t.retries
	res.ReceiveErrors = t.recvErrs
	if len(t.failed) > 0 {
		res.FailedSettles = maps.Clone(t.failed)
	}
	for n, s := range t.msgs {
		if !s.published {
			continue
		}
		switch {
		case t.plan.urn(n) == URNFail && s.dead > 0:
			res.DeadLettered++
		case t.plan.urn(n) != URNFail && s.handled > 0:
			res.Handled++
		default:
			res.Missing++
			if len(res.MissingN) < 20 {
				res.MissingN = append(res.MissingN, n)
			}
		}
	}
	for p, n := range t.problems {
		if n > 1 {
			p = fmt.Sprintf("%s (%d times)", p, n)
		}
		res.Problems = append(res.Problems, p)
	}
	if t.unknown > 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%d events or dead letters of messages the run never published", t.unknown))
	}
	slices.Sort(res.Problems)
}

// SoakMarkdown renders soak results as tables: each run's samples, then each measure's
// trend after the warm-up.
func SoakMarkdown(results []*SoakResult) string {
	var b strings.Builder
	for _, r := range results {
		fmt.Fprintf(&b, "#### %s (%s form): %.0f messages/s", r.Broker, r.Form, r.Rate)
		if r.Peak > 0 {
			fmt.Fprintf(&b, ", half the peak measured first (%.0f messages finished/s)", r.Peak)
		}
		fmt.Fprintf(&b, "; %.0f/s kept up after the warm-up\n\n", r.Achieved)
		fmt.Fprintf(&b, "Published %d: handled %d (%d of them flaky, handled on the retry), dead-lettered %d, **missing %d**, duplicates %d",
			r.Published, r.Handled, r.Flaky, r.DeadLettered, r.Missing, r.Duplicates)
		if len(r.FailedSettles) > 0 || r.ReceiveErrors > 0 {
			fmt.Fprintf(&b, "; failed settlements %v, failed receives %d", r.FailedSettles, r.ReceiveErrors)
		}
		b.WriteString(".\n\n")
		b.WriteString("| at | RSS | Go heap live | heap objects | goroutines | fds | p50 | p99 | first deliveries | published/s |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for i, sm := range r.Samples {
			at := sm.End.String()
			if sm.Warmup {
				at += " (warm-up)"
			}
			w := sm.End // every window is as long as the first
			if i > 0 {
				w -= r.Samples[i-1].End
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %d | %.0f |\n", at,
				format(MeasureRSS, sm.RSS), format(MeasureHeap, sm.HeapLive), format(MeasureHeap, sm.HeapObjects),
				format(MeasureGoroutines, sm.Goroutines), format(MeasureFDs, sm.FDs),
				format(MeasureP99, float64(sm.P50)), format(MeasureP99, float64(sm.P99)), sm.Latencies,
				float64(sm.Published)/w.Seconds())
		}
		b.WriteString("\n| measure | fitted first | fitted last | growth | at least (95 %) | first sample | last sample | flat (≤ ")
		fmt.Fprintf(&b, "%.0f%%) |\n|---|---:|---:|---:|---:|---:|---:|---|\n", 100*r.MaxGrowth)
		for _, t := range r.Trends {
			ok := "yes"
			switch {
			case !t.OK && t.Reported:
				ok = "no (reported, not judged in this form)"
			case !t.OK:
				ok = "**NO**"
			case t.Reported:
				ok = "yes (reported, not judged in this form)"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %+.1f%% | %+.1f%% | %s | %s | %s |\n", t.Measure, format(t.Measure, t.First),
				format(t.Measure, t.Last), 100*t.Growth, 100*t.GrowthLow, format(t.Measure, t.RawFirst), format(t.Measure, t.RawLast), ok)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "\n- %s", n)
		}
		b.WriteString("\n\n")
	}
	return b.String()
}
