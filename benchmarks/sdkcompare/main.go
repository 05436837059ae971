// Command sdkcompare measures the Go runtime beside the Python SDK (babelqueue 1.24.0)
// and a raw client on the same broker, each in processes of its own, and checks that
// every message was handled exactly once.
//
//	go run ./benchmarks/sdkcompare -brokers redis,amqp -rounds 3
//
// (scripts/sdkbench.sh starts the brokers and the Python environment first.) For each
// broker, round and implementation (raw client, Go SDK, Python SDK; their order turns
// every round, so all three see the same machine load), it publishes N messages with
// one publisher and with eight, each publish confirmed as the implementation confirms
// it, and consumes each queue with one worker and with eight. The Go SDK and the raw
// client also publish in confirmed batches of 100 (App.PublishBatch; the Python SDK has
// no batch publish). Python's eight publishers or workers are eight processes, Go's and
// the raw client's eight goroutines of one process. Every consume checks that each of
// the N messages was handled exactly once.
//
// Each child reports the wall-clock instants of its first and last message, its CPU
// time from being connected to the end and its peak resident memory (VmHWM);
// throughput is N over the span from the first message of any process to the last,
// CPU per message the processes' CPU summed over N. The table is printed in Markdown
// with medians over the rounds.
//
// The steady run (-ops steady; Go SDK and raw client) measures what a throughput run
// cannot: one publisher paced at -steady-rate (200 msgs/s) while one worker consumes
// at once, each body carrying the instant it was published (data.at). The consumer
// keeps each message's end-to-end latency, its publish to its handler's start (the
// processes share the machine's wall clock), and reads its own resident memory
// (/proc/self/status) and Go heap (runtime/metrics, HeapAlloc) every 50 ms; what was
// published in its first 2 s is left out as warm-up. It prints p50, p99 and the
// medians of the memory beside the raw client's. On Redis, -impls raw,floor,go adds
// the floor (floor.go): a hand-written client that keeps the family's layout and makes
// a new envelope per message, the least any SDK of the family does there.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "child" {
		var j job
		if err := json.Unmarshal([]byte(os.Args[2]), &j); err != nil {
			fatal(err)
		}
		if path := os.Getenv("SDKCOMPARE_CPUPROFILE"); path != "" {
			// A child's CPU profile, to see where its time goes.
			f, err := os.Create(path)
			if err != nil {
				fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				fatal(err)
			}
		}
		res, err := runChild(j)
		pprof.StopCPUProfile()
		if err != nil {
			fatal(err)
		}
		res.MaxRSS = maxRSS()
		if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
			fatal(err)
		}
		return
	}
	if err := orchestrate(os.Args[1:]); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "sdkcompare:", err)
	os.Exit(1)
}

// job is what one child process does.
type job struct {
	Impl    string `json:"impl"` // raw, go
	Op      string `json:"op"`   // publish, batch, consume
	Broker  string `json:"broker"`
	URL     string `json:"url"`
	Queue   string `json:"queue"`
	First   int    `json:"first"`
	Count   int    `json:"count"`
	Workers int    `json:"workers"`
	Group   string `json:"group"`
	// Prefetch is what a consumer may hold at once (the Go SDK's WithPrefetch, the raw
	// client's qos, credit or receiver queue); the Python SDK takes one at a time.
	Prefetch int           `json:"prefetch"`
	Idle     time.Duration `json:"idle"`
	// Fail makes the handler of every odd n fail (the Go SDK with max_attempts 3 and
	// the dead-letter queue on): each is attempted three times, then dead-lettered.
	Fail bool `json:"fail"`
	// Rate paces a publish of one publisher at that many messages a second, each body
	// carrying the instant it is published (data.at, Unix ns); 0 publishes flat out
	// with no instant.
	Rate float64 `json:"rate,omitempty"`
	// Steady makes a consumer keep each message's latency (its handler's start less
	// its data.at) and read its own memory every 50 ms, leaving out as warm-up the
	// messages published, and the readings taken, before Warm had passed since it
	// handled its first message (whatever a first connection or a Kafka group's first
	// assignment held back has drained by then).
	Steady bool          `json:"steady,omitempty"`
	Warm   time.Duration `json:"warm,omitempty"`
}

// result is what a child reports.
type result struct {
	First   int64   `json:"first"` // Unix ns of the first message
	Last    int64   `json:"last"`  // Unix ns of the last message
	CPU     float64 `json:"cpu"`   // CPU seconds from connected to the end
	Count   int     `json:"count"`
	Handled []int   `json:"handled,omitempty"`
	// MaxRSS is the process's peak resident memory (VmHWM), in bytes.
	MaxRSS int64 `json:"max_rss"`
	// A steady consumer's, after the warm-up: the latency of each message (its
	// handler's start less its publish, ns), and the medians of its resident memory
	// and Go heap (runtime/metrics /memory/classes/heap/objects:bytes, the MemStats
	// HeapAlloc) read every 50 ms until its last message.
	Lats []int64 `json:"lats,omitempty"`
	RSS  float64 `json:"rss,omitempty"`
	Heap float64 `json:"heap,omitempty"`
}

func runChild(j job) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	switch j.Impl {
	case "go":
		return goSDK(ctx, j)
	case "raw":
		r, ok := raws[j.Broker]
		if !ok {
			return result{}, fmt.Errorf("no raw client for %q", j.Broker)
		}
		return r(ctx, j)
	case "floor":
		f, ok := floors[j.Broker]
		if !ok {
			return result{}, fmt.Errorf("no floor client for %q", j.Broker)
		}
		return f(ctx, j)
	}
	return result{}, fmt.Errorf("unknown implementation %q", j.Impl)
}

// processCPU is the process's user and system CPU time in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// maxRSS is the process's peak resident memory in bytes: VmHWM, the high-water mark
// of its own address space. (getrusage's ru_maxrss will not do: a child started
// with fork and exec keeps its parent's high-water mark as a floor.)
func maxRSS() int64 {
	return int64(statusBytes("VmHWM:"))
}

// statusBytes reads a memory figure of /proc/self/status ("VmRSS:"), in bytes; 0
// when it cannot.
func statusBytes(field string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb * 1024
		}
	}
	return 0
}

// memReading is one look at the process's memory.
type memReading struct {
	at        int64 // Unix ns
	rss, heap float64
}

// readMemory reads the process's resident memory (VmRSS) and its Go heap's objects.
func readMemory() (rss, heap float64) {
	rss = statusBytes("VmRSS:")
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		heap = float64(s[0].Value.Uint64())
	}
	return rss, heap
}

// recorder collects what a consumer handled and when; it says when the consumer has
// been idle long enough to stop. A steady one also keeps the latencies and reads the
// process's memory.
type recorder struct {
	mu          sync.Mutex
	first, last int64
	handled     []int
	cpu0        float64

	steady  bool
	warm    time.Duration
	lats    []latency
	mem     []memReading
	stopMem chan struct{}
	memGone chan struct{}
}

// latency is a message's publish instant and how long after it its handler started.
type latency struct{ at, took int64 }

func newRecorder() *recorder { return &recorder{cpu0: processCPU()} }

// newRecorderFor returns the recorder of consumer job j: a steady one reads the
// process's memory every 50 ms until result.
func newRecorderFor(j job) *recorder {
	r := newRecorder()
	if !j.Steady {
		return r
	}
	r.steady, r.warm, r.stopMem, r.memGone = true, j.Warm, make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.memGone)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-r.stopMem:
				return
			case <-t.C:
				rss, heap := readMemory()
				r.mu.Lock()
				r.mem = append(r.mem, memReading{at: time.Now().UnixNano(), rss: rss, heap: heap})
				r.mu.Unlock()
			}
		}
	}()
	return r
}

// add records that message n, published at at (Unix ns; 0 unknown), was handled now.
func (r *recorder) add(n int, at int64) {
	now := time.Now().UnixNano()
	r.mu.Lock()
	if len(r.handled) == 0 {
		r.first = now
	}
	r.last = now
	r.handled = append(r.handled, n)
	if r.steady && at > 0 {
		r.lats = append(r.lats, latency{at: at, took: now - at})
	}
	r.mu.Unlock()
}

// idle reports that at least one message came and none for d, or none came in a minute.
func (r *recorder) idle(d time.Duration, since time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.handled) == 0 {
		return time.Since(since) > time.Minute
	}
	return time.Since(time.Unix(0, r.last)) > d
}

// waitIdle returns once the recorder is idle for d.
func (r *recorder) waitIdle(ctx context.Context, d time.Duration) {
	start := time.Now()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !r.idle(d, start) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *recorder) result() result {
	if r.steady {
		close(r.stopMem)
		<-r.memGone
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	res := result{First: r.first, Last: r.last, CPU: processCPU() - r.cpu0, Count: len(r.handled), Handled: r.handled}
	if !r.steady || len(r.handled) == 0 {
		return res
	}
	warmed := r.first + int64(r.warm)
	for _, l := range r.lats {
		if l.at >= warmed {
			res.Lats = append(res.Lats, l.took)
		}
	}
	var rss, heap []float64
	for _, m := range r.mem {
		if m.at >= warmed && m.at <= r.last {
			rss, heap = append(rss, m.rss), append(heap, m.heap)
		}
	}
	if len(rss) > 0 {
		res.RSS, res.Heap = median(rss), median(heap)
	}
	return res
}

// ready tells the orchestrator that the child is connected and waits for its go: the
// processes of one run start their clocks together.
func ready() {
	fmt.Println("ready")
	var line string
	_, _ = fmt.Scanln(&line)
}

// stamp is what a publisher calls for message i before it builds the body: in a paced
// publish it waits until message i is due and returns the instant, Unix ns, that the
// body carries as data.at; otherwise it returns 0 at once (no data.at).
type stamp func(i int) int64

// publishAll runs send for messages first..first+count-1 split over workers goroutines
// and reports the span and the CPU. A paced job (Rate, one publisher) has message i
// due at the start plus (i − first) / Rate.
func publishAll(j job, send func(worker, from, to int, at stamp) error) (result, error) {
	ready()
	cpu0 := processCPU()
	begin := time.Now()
	start := begin.UnixNano()
	at := func(int) int64 { return 0 }
	if j.Op == "publish" && j.Rate > 0 {
		if j.Workers != 1 {
			return result{}, fmt.Errorf("a paced publish has one publisher, not %d", j.Workers)
		}
		every := time.Duration(float64(time.Second) / j.Rate)
		at = func(i int) int64 {
			time.Sleep(time.Until(begin.Add(time.Duration(i-j.First) * every)))
			return time.Now().UnixNano()
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, j.Workers)
	per := (j.Count + j.Workers - 1) / j.Workers
	for w := range j.Workers {
		from, to := j.First+w*per, min(j.First+(w+1)*per, j.First+j.Count)
		if from >= to {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = send(w, from, to, at)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return result{}, err
	}
	return result{First: start, Last: time.Now().UnixNano(), CPU: processCPU() - cpu0, Count: j.Count}, nil
}

// body is the envelope the raw clients send: what the SDKs make; with at (a paced
// publish) data also carries the instant it was published.
func body(n int, at int64) []byte {
	data := fmt.Sprintf(`{"n":%d}`, n)
	if at != 0 {
		data = fmt.Sprintf(`{"n":%d,"at":%d}`, n, at)
	}
	return fmt.Appendf(nil, `{"job":"urn:babel:bench:sdk","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":%s,"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-%012d","queue":"bench","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`, data, n)
}

// dataN reads data.n and data.at (0 when absent) of a body, as a raw consumer would.
func dataN(b []byte) (n int, at int64, err error) {
	var e struct {
		Data struct {
			N  int   `json:"n"`
			At int64 `json:"at"`
		} `json:"data"`
	}
	err = json.Unmarshal(b, &e)
	return e.Data.N, e.Data.At, err
}

// ---- the orchestrator ----

var brokerEnv = map[string]string{
	"redis": "BQ_REDIS_URL", "amqp": "BQ_AMQP_URL", "kafka": "BQ_KAFKA_URL",
	"sqs": "BQ_SQS_URL", "artemis": "BQ_ARTEMIS_URL", "pulsar": "BQ_PULSAR_URL",
}

var defaultN = map[string]int{"redis": 4000, "amqp": 3000, "kafka": 4000, "sqs": 1000, "artemis": 1000, "pulsar": 2000}

type options struct {
	brokers  []string
	rounds   int
	n        int
	python   string
	script   string
	idle     time.Duration
	verbose  bool
	prefetch int
	impls    []string // the implementations measured, in their turning order
	ops      map[string]bool
	latRate  float64 // the paced run's rate, messages/s
	latN     int     // the paced run's messages
}

func orchestrate(args []string) error {
	fs := flag.NewFlagSet("sdkcompare", flag.ContinueOnError)
	brokers := fs.String("brokers", "redis,amqp,kafka,sqs,artemis,pulsar", "brokers to measure")
	var o options
	fs.IntVar(&o.rounds, "rounds", 3, "rounds (medians are taken over them)")
	fs.IntVar(&o.n, "n", 0, "messages per run (default: per broker)")
	fs.StringVar(&o.python, "python", os.Getenv("BQ_PYTHON"), "the Python with babelqueue 1.24.0 (scripts/pyenv.sh)")
	fs.DurationVar(&o.idle, "idle", 2*time.Second, "a consumer stops after this long without a message")
	fs.BoolVar(&o.verbose, "v", false, "print every run")
	fs.IntVar(&o.prefetch, "prefetch", 10, "prefetch per worker of the Go SDK and the raw client")
	impls := fs.String("impls", "raw,go,python", "implementations to measure: raw, go, python; floor (Redis, steady run only: the family's layout and a new envelope per message, by hand; see floor.go)")
	ops := fs.String("ops", "1,8,batch,fail,steady", "runs to make: 1 and 8 (publishers, then as many workers), batch (published in batches, 8 workers), fail (Go, and the raw RabbitMQ and Kafka clients: half the handlers failing; its ratio needs batch), steady (Go and raw: one publisher paced at -steady-rate while one worker consumes; latency and memory)")
	fs.Float64Var(&o.latRate, "steady-rate", 200, "the steady run's pace, messages/s")
	fs.IntVar(&o.latN, "steady-n", 2000, "the steady run's messages (what is published in the consumer's first 2 s warms up)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.impls = strings.Split(*impls, ",")
	o.ops = map[string]bool{}
	for _, op := range strings.Split(*ops, ",") {
		o.ops[op] = true
	}
	if o.python == "" && slices.Contains(o.impls, "python") {
		return errors.New("no Python: set BQ_PYTHON or -python (bash scripts/pyenv.sh prints it)")
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	o.script = filepath.Join(root, "scripts", "py", "sdkbench.py")
	o.brokers = strings.Split(*brokers, ",")
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at start: %s\n", strings.Join(strings.Fields(string(load))[:3], " "))
	for _, b := range o.brokers {
		url := os.Getenv(brokerEnv[b])
		if url == "" {
			return fmt.Errorf("%s: %s is not set (eval \"$(bash scripts/brokers.sh env)\")", b, brokerEnv[b])
		}
		if err := measureBroker(o, b, url); err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
	}
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("\nload average at the end: %s\n", strings.Join(strings.Fields(string(load))[:3], " "))
	return nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run from inside the repository (no go.work above)")
		}
		dir = parent
	}
}

// sample is one measured run.
type sample struct {
	rate, cpuPerMsg float64 // msgs/s (in a half-failing run: messages finished/s), µs
	deliveryRate    float64 // deliveries handled and settled per second (attempts included)
	maxRSS          float64 // the largest peak resident memory of the run's processes, bytes
	check           string  // "" when every message was handled exactly once
}

type rowKey struct{ impl, op string }

// steadySample is one steady run: one publisher paced, one worker consuming at once.
type steadySample struct {
	p50, p99  time.Duration // publish to handler start, the warm-up left out
	rss, heap float64       // medians while consuming, bytes
	check     string        // "" when every message was handled exactly once
}

func measureBroker(o options, broker, url string) error {
	n := o.n
	if n == 0 {
		n = defaultN[broker]
	}
	if broker == "kafka" {
		// A consumer group's rebalance (eight Python processes joining one after the
		// other) stops every member for seconds: waiting longer before calling a consumer
		// done keeps it from stopping mid-run. The rate runs from the first message to
		// the last, so the wait does not count.
		o.idle = max(o.idle, 12*time.Second)
	}
	samples := map[rowKey][]sample{}
	steady := map[string][]steadySample{}
	impls := o.impls
	for round := range o.rounds {
		k := round % len(impls)
		order := append(slices.Clone(impls[k:]), impls[:k]...)
		for _, impl := range order {
			plan := []struct {
				op      string
				pubOp   string
				workers int
			}{{"1", "publish", 1}, {"8", "publish", 8}}
			if impl == "floor" { // the steady run only
				plan = nil
			}
			if impl != "python" && impl != "floor" {
				plan = append(plan, struct {
					op      string
					pubOp   string
					workers int
				}{"batch", "batch", 1})
			}
			if impl == "go" || impl == "raw" && rawFails[broker] {
				plan = append(plan, struct {
					op      string
					pubOp   string
					workers int
				}{"fail", "batch", 1})
			}
			for _, p := range plan {
				if !o.ops[p.op] {
					continue
				}
				q := fmt.Sprintf("bqsdk-%s-%s-%d-%d", impl, p.op, round, time.Now().UnixNano()%1e9)
				switch broker {
				case "kafka":
					if err := createTopic(url, q, 8); err != nil {
						return err
					}
				case "sqs":
					if err := createSQSQueue(url, q); err != nil {
						return err
					}
				}
				pub, err := o.run(impl, job{Op: p.pubOp, Broker: broker, URL: url, Queue: q, Count: n, Workers: p.workers})
				if err != nil {
					return fmt.Errorf("%s %s publish: %w", impl, p.op, err)
				}
				if pubName, ok := map[string]string{"1": "publish, 1 publisher", "8": "publish, 8 publishers", "batch": "publish, batches of 100"}[p.op]; ok {
					samples[rowKey{impl, pubName}] = append(samples[rowKey{impl, pubName}], summarize(pub, n, checkNone))
				}
				workers := p.workers
				if p.op == "batch" || p.op == "fail" {
					workers = 8
				}
				con, err := o.run(impl, job{Op: "consume", Broker: broker, URL: url, Queue: q, Count: n, Workers: workers, Group: q,
					Idle: o.idle, Prefetch: o.prefetch * workers, Fail: p.op == "fail"})
				if err != nil {
					return fmt.Errorf("%s consume: %w", impl, err)
				}
				check := checkOnce
				if p.op == "fail" {
					check = checkHalfFailing
				}
				s := summarize(con, n, check)
				conName := fmt.Sprintf("consume, %d worker%s", workers, map[bool]string{true: "s"}[workers > 1])
				switch p.op {
				case "batch":
					conName += " (batch-published queue)"
				case "fail":
					conName = failRow
				}
				samples[rowKey{impl, conName}] = append(samples[rowKey{impl, conName}], s)
				if o.verbose {
					fmt.Fprintf(os.Stderr, "%s round %d %s %s: publish %.0f msgs/s, consume %.0f msgs/s %s\n", broker, round, impl, p.op, summarize(pub, n, checkNone).rate, s.rate, s.check)
				}
			}
			if o.ops["steady"] && impl != "python" {
				st, err := o.steady(impl, broker, url, round)
				if err != nil {
					return fmt.Errorf("%s steady: %w", impl, err)
				}
				steady[impl] = append(steady[impl], st)
				if o.verbose {
					fmt.Fprintf(os.Stderr, "%s round %d %s steady: p50 %s, p99 %s, RSS %.1f MiB, heap %.1f MiB %s\n", broker, round, impl, st.p50, st.p99, st.rss/(1<<20), st.heap/(1<<20), st.check)
				}
			}
		}
	}
	printTable(broker, n, o.rounds, samples)
	printFailures(samples)
	printSteady(o, steady)
	return nil
}

// steadyWarm is the steady run's warm-up: from the consumer's first message on.
const steadyWarm = 2 * time.Second

// steady runs one publisher paced at o.latRate while one worker consumes the queue
// (prefetch o.prefetch): each message's latency from its publish to its handler's
// start, and the consumer's memory, what was published in the consumer's first
// steadyWarm left out (a Kafka group's first assignment, the first connections).
func (o options) steady(impl, broker, url string, round int) (steadySample, error) {
	q := fmt.Sprintf("bqsdk-%s-steady-%d-%d", impl, round, time.Now().UnixNano()%1e9)
	switch broker {
	case "kafka":
		if err := createTopic(url, q, 8); err != nil {
			return steadySample{}, err
		}
	case "sqs":
		if err := createSQSQueue(url, q); err != nil {
			return steadySample{}, err
		}
	}
	con := job{Op: "consume", Broker: broker, URL: url, Queue: q, Count: o.latN, Workers: 1, Group: q, Idle: o.idle,
		Prefetch: o.prefetch, Steady: true, Warm: steadyWarm}
	pub := job{Op: "publish", Broker: broker, URL: url, Queue: q, Count: o.latN, Workers: 1, Rate: o.latRate}
	rs, err := o.runTogether(impl, con, pub)
	if err != nil {
		return steadySample{}, err
	}
	c := rs[0]
	st := steadySample{rss: c.RSS, heap: c.Heap, check: summarize(rs[:1], o.latN, checkOnce).check}
	lats := slices.Clone(c.Lats)
	slices.Sort(lats)
	if len(lats) > 0 {
		st.p50, st.p99 = time.Duration(percentile(lats, 0.50)), time.Duration(percentile(lats, 0.99))
	}
	return st, nil
}

// percentile returns the q-th quantile of sorted by the nearest rank.
func percentile(sorted []int64, q float64) int64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// runTogether starts the consumer of a steady run, then its publisher, lets them start
// together once both are connected, and returns the consumer's result, then the
// publisher's.
func (o options) runTogether(impl string, con, pub job) ([]result, error) {
	con.Impl, pub.Impl = impl, impl
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var ps []*child
	for _, j := range []job{con, pub} {
		arg, _ := json.Marshal(j)
		p, err := startChild(exe, "child", string(arg))
		if err == nil {
			err = p.awaitReady()
		}
		if err != nil {
			for _, q := range ps {
				q.kill()
			}
			return nil, err
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		p.start()
	}
	var out []result
	var errs []error
	for _, p := range ps {
		r, err := p.wait()
		errs = append(errs, err)
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// printSteady prints the steady runs of the Go SDK beside the raw client's (and the
// floor's, when it ran): medians over the rounds.
func printSteady(o options, steady map[string][]steadySample) {
	if len(steady) == 0 {
		return
	}
	floor := len(steady["floor"]) > 0
	fmt.Printf("\nSteady state: one publisher paced at %.0f msgs/s, one worker (prefetch %d) consuming at once, %d messages, what was published in the consumer's first %s left out as warm-up; medians of %d rounds\n\n",
		o.latRate, o.prefetch, o.latN, steadyWarm, o.rounds)
	if floor {
		fmt.Println("| measure | raw client | floor | Go SDK | floor vs raw | Go vs raw | Go vs floor |")
		fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	} else {
		fmt.Println("| measure | raw client | Go SDK | Go vs raw |")
		fmt.Println("|---|---:|---:|---:|")
	}
	med := func(impl string, f func(steadySample) float64) (float64, bool) {
		ss := steady[impl]
		if len(ss) == 0 {
			return 0, false
		}
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		return median(v), true
	}
	row := func(name string, f func(steadySample) float64, format func(float64) string) {
		r, rok := med("raw", f)
		l, lok := med("floor", f)
		g, gok := med("go", f)
		cell := func(v float64, ok bool) string {
			if !ok {
				return "–"
			}
			return format(v)
		}
		ratio := func(a float64, aok bool, b float64, bok bool) string {
			if !aok || !bok || b <= 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f×", a/b)
		}
		if floor {
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", name, cell(r, rok), cell(l, lok), cell(g, gok),
				ratio(l, lok, r, rok), ratio(g, gok, r, rok), ratio(g, gok, l, lok))
			return
		}
		fmt.Printf("| %s | %s | %s | %s |\n", name, cell(r, rok), cell(g, gok), ratio(g, gok, r, rok))
	}
	dur := func(ns float64) string {
		if ns < 10e6 {
			return fmt.Sprintf("%.0f µs", ns/1e3)
		}
		return fmt.Sprintf("%.1f ms", ns/1e6)
	}
	mib := func(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
	row("p50 latency, publish → handler start", func(s steadySample) float64 { return float64(s.p50) }, dur)
	row("p99 latency, publish → handler start", func(s steadySample) float64 { return float64(s.p99) }, dur)
	row("RSS while consuming (median)", func(s steadySample) float64 { return s.rss }, mib)
	row("Go heap while consuming (median of HeapAlloc)", func(s steadySample) float64 { return s.heap }, mib)
	checks := func(impl string) string {
		var bad []string
		for _, s := range steady[impl] {
			if s.check != "" {
				bad = append(bad, s.check)
			}
		}
		if len(steady[impl]) == 0 {
			return "–"
		}
		if len(bad) > 0 {
			return "**NO**: " + strings.Join(bad, "; ")
		}
		return "yes"
	}
	if floor {
		fmt.Printf("| every message handled once | %s | %s | %s | | | |\n", checks("raw"), checks("floor"), checks("go"))
		return
	}
	fmt.Printf("| every message handled once | %s | %s | |\n", checks("raw"), checks("go"))
}

// run starts the processes of one run, lets them all start together once each is
// connected, and collects their results.
func (o options) run(impl string, j job) ([]result, error) {
	j.Impl = impl
	var cmds [][]string
	if impl != "python" {
		arg, _ := json.Marshal(j)
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, []string{exe, "child", string(arg)})
	} else {
		// Python: one process per publisher or worker.
		per := (j.Count + j.Workers - 1) / j.Workers
		for w := range j.Workers {
			switch j.Op {
			case "publish":
				from, to := w*per, min((w+1)*per, j.Count)
				cmds = append(cmds, []string{o.python, o.script, "publish", j.URL, j.Queue, fmt.Sprint(from), fmt.Sprint(to - from)})
			case "consume":
				cmds = append(cmds, []string{o.python, o.script, "consume", j.URL, j.Queue, j.Group, fmt.Sprint(j.Idle.Seconds())})
			default:
				return nil, fmt.Errorf("python has no %s", j.Op)
			}
		}
	}
	ps := make([]*child, len(cmds))
	for i, c := range cmds {
		p, err := startChild(c[0], c[1:]...)
		if err != nil {
			for _, q := range ps[:i] {
				q.kill()
			}
			return nil, err
		}
		ps[i] = p
	}
	var errs []error
	for _, p := range ps {
		if err := p.awaitReady(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		for _, p := range ps {
			p.kill()
		}
		return nil, errors.Join(errs...)
	}
	for _, p := range ps {
		p.start()
	}
	out := make([]result, 0, len(ps))
	for _, p := range ps {
		r, err := p.wait()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// child is a running child process: it prints "ready" once connected, starts on a line
// on its standard input, and prints its result as its last line.
type child struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr *strings.Builder
}

func startChild(name string, args ...string) (*child, error) {
	c := &child{name: filepath.Base(name) + " " + args[0], cmd: exec.Command(name, args...), stderr: &strings.Builder{}}
	c.cmd.Stderr = c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.out = bufio.NewReaderSize(stdout, 1<<20)
	return c, c.cmd.Start()
}

func (c *child) awaitReady() error {
	for {
		line, err := c.out.ReadString('\n')
		if strings.TrimSpace(line) == "ready" {
			return nil
		}
		if err != nil {
			_ = c.cmd.Wait()
			return fmt.Errorf("%s never got ready: %w: %s", c.name, err, tail(c.stderr.String()))
		}
	}
}

func (c *child) start() {
	_, _ = io.WriteString(c.stdin, "go\n")
	_ = c.stdin.Close()
}

func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

func (c *child) wait() (result, error) {
	raw, _ := io.ReadAll(c.out)
	if err := c.cmd.Wait(); err != nil {
		return result{}, fmt.Errorf("%s: %w: %s", c.name, err, tail(c.stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	var r result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		return result{}, fmt.Errorf("%s: bad result %q: %w", c.name, tail(string(raw)), err)
	}
	return r, nil
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

// What summarize checks of the n handled in a run.
const (
	checkNone        = iota
	checkOnce        // each of 0..N-1 handled exactly once
	checkHalfFailing // each even n once, each odd n three times (attempted, then dead-lettered)
)

// failRow names the failure-heavy run in the table.
const failRow = "consume, 8 workers, half the handlers failing (max_attempts 3, DLQ on)"

// summarize merges the results of one run's processes. In a half-failing run the rate
// is of messages finished (handled, or dead-lettered after their three attempts).
func summarize(rs []result, n int, check int) sample {
	var first, last int64
	var cpu float64
	count := 0
	seen := make([]int, n)
	var stray int
	s := sample{}
	for _, r := range rs {
		if r.Count == 0 {
			continue
		}
		if first == 0 || r.First < first {
			first = r.First
		}
		if r.Last > last {
			last = r.Last
		}
		cpu += r.CPU
		count += r.Count
		s.maxRSS = max(s.maxRSS, float64(r.MaxRSS))
		for _, k := range r.Handled {
			if k < 0 || k >= n {
				stray++
				continue
			}
			seen[k]++
		}
	}
	finished := count
	if check == checkHalfFailing {
		finished = n
	}
	if span := float64(last-first) / 1e9; span > 0 {
		s.rate = float64(finished) / span
		s.deliveryRate = float64(count) / span
	}
	if finished > 0 {
		s.cpuPerMsg = cpu / float64(finished) * 1e6
	}
	if check != checkNone {
		var missing, dup int
		for k, c := range seen {
			want := 1
			if check == checkHalfFailing && k%2 == 1 {
				want = 3
			}
			switch {
			case c < want:
				missing += want - c
			case c > want:
				dup += c - want
			}
		}
		if missing+dup+stray > 0 {
			s.check = fmt.Sprintf("missing %d, duplicates %d, strays %d", missing, dup, stray)
		}
	}
	return s
}

func printTable(broker string, n, rounds int, samples map[rowKey][]sample) {
	fmt.Printf("\n### %s (%d messages per run, medians of %d rounds)\n", broker, n, rounds)
	if len(samples) == 0 {
		return // only the steady run was made
	}
	fmt.Println()
	fmt.Println("| work | raw client msgs/s | Go SDK msgs/s | Python SDK msgs/s | Go vs raw | Go vs Python | CPU µs/msg raw / Go / Python | peak RSS MiB raw / Go | every message handled once |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---|---|---|")
	ops := []string{"publish, 1 publisher", "publish, 8 publishers", "publish, batches of 100",
		"consume, 1 worker", "consume, 8 workers", "consume, 8 workers (batch-published queue)"}
	for _, op := range ops {
		if len(samples[rowKey{"raw", op}])+len(samples[rowKey{"go", op}])+len(samples[rowKey{"python", op}]) == 0 {
			continue // not measured (-ops)
		}
		med := func(impl string) (rate, cpu, rss float64, check string, ok bool) {
			ss := samples[rowKey{impl, op}]
			if len(ss) == 0 {
				return 0, 0, 0, "", false
			}
			var rs, cs, ms []float64
			var bad []string
			for _, s := range ss {
				rs, cs, ms = append(rs, s.rate), append(cs, s.cpuPerMsg), append(ms, s.maxRSS/(1<<20))
				if s.check != "" {
					bad = append(bad, s.check)
				}
			}
			return median(rs), median(cs), median(ms), strings.Join(bad, "; "), true
		}
		rr, rc, rm, rchk, rok := med("raw")
		gr, gc, gm, gchk, gok := med("go")
		pr, pc, _, pchk, pok := med("python")
		cell := func(v float64, ok bool, f string) string {
			if !ok {
				return "–"
			}
			return fmt.Sprintf(f, v)
		}
		ratio := func(a, b float64, ok bool) string {
			if !ok || b == 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f×", a/b)
		}
		checks := "yes"
		if strings.HasPrefix(op, "publish") {
			checks = "(checked by the consume of the same queue)"
		} else if all := strings.Trim(strings.Join([]string{rchk, gchk, pchk}, " "), " "); all != "" {
			checks = "**NO**: raw " + rchk + " / go " + gchk + " / python " + pchk
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s / %s / %s | %s / %s | %s |\n", op,
			cell(rr, rok, "%.0f"), cell(gr, gok, "%.0f"), cell(pr, pok, "%.0f"),
			ratio(gr, rr, gok && rok), ratio(gr, pr, gok && pok),
			cell(rc, rok, "%.0f"), cell(gc, gok, "%.0f"), cell(pc, pok, "%.0f"),
			cell(rm, rok && rm > 0, "%.1f"), cell(gm, gok && gm > 0, "%.1f"), checks)
	}
}

// printFailures prints the failure-heavy run of the Go SDK (and of the raw client, on
// the brokers where it has one) beside its all-success consume with the same workers,
// per round, in two rates: messages finished per second (handled, or dead-lettered after
// their three attempts) and deliveries settled per second (every attempt). Half the
// messages take three deliveries, so a message takes two on average: with settle writes
// that cost nothing the first ratio would be 0.5 and the second 1.
func printFailures(samples map[rowKey][]sample) {
	for _, impl := range []string{"raw", "go"} {
		fail, ok := samples[rowKey{impl, failRow}], len(samples[rowKey{impl, failRow}]) > 0
		base := samples[rowKey{impl, "consume, 8 workers (batch-published queue)"}]
		if !ok || len(base) != len(fail) {
			continue
		}
		var rates, drates, ratios, dratios, cpus []float64
		var bad []string
		for i := range fail {
			rates, drates, cpus = append(rates, fail[i].rate), append(drates, fail[i].deliveryRate), append(cpus, fail[i].cpuPerMsg)
			if base[i].rate > 0 {
				ratios = append(ratios, fail[i].rate/base[i].rate)
				dratios = append(dratios, fail[i].deliveryRate/base[i].rate)
			}
			if fail[i].check != "" {
				bad = append(bad, fail[i].check)
			}
		}
		checks := "yes"
		if len(bad) > 0 {
			checks = "**NO**: " + strings.Join(bad, "; ")
		}
		who := map[string]string{"go": "Go SDK", "raw": "Raw client"}[impl]
		fmt.Printf("\n%s, %s: %.0f messages finished/s (%.0f deliveries settled/s), %.0f CPU µs per message; **%.2f×** the all-success consume of the same round in messages (rounds %s; 0.5× is the ceiling: a message takes two deliveries on average), **%.2f×** in deliveries (rounds %s); every even message handled once and every odd one attempted three times: %s\n",
			who, failRow, median(rates), median(drates), median(cpus), median(ratios), roundList(ratios), median(dratios), roundList(dratios), checks)
	}
}

// roundList formats per-round ratios.
func roundList(v []float64) string {
	s := make([]string, len(v))
	for i, r := range v {
		s[i] = fmt.Sprintf("%.2f", r)
	}
	return strings.Join(s, ", ")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
