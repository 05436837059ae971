package faultsuite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/metrics"
	"strconv"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
)

// The URNs of the workload: good messages are handled, failing ones always fail, flaky
// ones fail on their first delivery and are handled on the retry (a soak run's mix).
const (
	URNGood  = "urn:babel:faults:good"
	URNFail  = "urn:babel:faults:fail"
	URNFlaky = "urn:babel:faults:flaky"
)

// Payload is the data of every message of a run: its number in the stream, when it
// was published (Unix nanoseconds; the handler's latency is measured from it), and for
// failing messages on brokers whose dead-letter refusal is by size, padding.
type Payload struct {
	N   int    `json:"n"`
	At  int64  `json:"at,omitempty"`
	Pad string `json:"pad,omitempty"`
}

// The environment that makes a process a worker and describes its run.
const (
	envRole         = "BQ_FAULTS_ROLE"
	envBroker       = "BQ_FAULTS_BROKER"
	envURL          = "BQ_FAULTS_URL"
	envQueue        = "BQ_FAULTS_QUEUE"
	envWorker       = "BQ_FAULTS_WORKER"
	envConcurrency  = "BQ_FAULTS_CONCURRENCY"
	envMaxAttempts  = "BQ_FAULTS_MAX_ATTEMPTS"
	envHandlerDelay = "BQ_FAULTS_HANDLER_DELAY"
	envCut          = "BQ_FAULTS_CUT"
	envReportDelay  = "BQ_FAULTS_REPORT_DELAY"
	envLateHeal     = "BQ_FAULTS_LATE_HEAL"
	envQuiet        = "BQ_FAULTS_QUIET"
)

// The commands a worker reads, one a line, on its standard input. End of input is a
// stop too: a worker never outlives the run that started it.
const (
	cmdCut  = "cut"
	cmdHeal = "heal"
	cmdStop = "stop"
	// cmdFreeze freezes the worker's connections, cmdThaw thaws them, cmdStrand lets
	// new ones through and leaves the frozen ones frozen (the blackhole scenarios).
	cmdFreeze = "freeze"
	cmdThaw   = "thaw"
	cmdStrand = "strand"
	// cmdSample asks for an EvSample event (any run; a soak run sends it every tick).
	cmdSample = "sample"
)

// IsWorker reports whether this process was started by [Run] as a worker: a test
// binary's TestMain calls [WorkerMain] then, instead of running its tests.
func IsWorker() bool { return os.Getenv(envRole) == "worker" }

// WorkerSpec is what a worker process is told through its environment.
type WorkerSpec struct {
	// Broker is the binding's name, URL the broker URL for workers, Queue the queue.
	Broker, URL, Queue string
	// Worker is this worker's number in the run.
	Worker int
	// Concurrency is the runtime's worker goroutines; MaxAttempts its max attempts.
	Concurrency, MaxAttempts int
	// HandlerDelay is how long a good message's handler works.
	HandlerDelay time.Duration
	// Cut asks for a transport whose connections go through a [Switch] (a [Freezer]
	// for the blackhole scenarios).
	Cut bool
	// ReportDelay holds each settlement's report back that long (see
	// [Plan.ReportDelay]).
	ReportDelay time.Duration
	// LateHeal lets this worker's connections through again that much after it
	// acknowledged the heal (see [Plan.LateHeal]).
	LateHeal time.Duration
	// Quiet reports only what a soak run accounts with: the handlers' events, the
	// settlements that failed and the receive errors; not every reception and
	// settlement, which a fault run needs and a long run at speed cannot carry.
	Quiet bool
}

func (s WorkerSpec) environ() []string {
	cut, quiet := "0", "0"
	if s.Cut {
		cut = "1"
	}
	if s.Quiet {
		quiet = "1"
	}
	return []string{envQuiet + "=" + quiet,
		envRole + "=worker", envBroker + "=" + s.Broker, envURL + "=" + s.URL, envQueue + "=" + s.Queue,
		envWorker + "=" + strconv.Itoa(s.Worker), envConcurrency + "=" + strconv.Itoa(s.Concurrency),
		envMaxAttempts + "=" + strconv.Itoa(s.MaxAttempts), envHandlerDelay + "=" + s.HandlerDelay.String(),
		envCut + "=" + cut, envReportDelay + "=" + s.ReportDelay.String(), envLateHeal + "=" + s.LateHeal.String(),
	}
}

func specFromEnv() (WorkerSpec, error) {
	s := WorkerSpec{Broker: os.Getenv(envBroker), URL: os.Getenv(envURL), Queue: os.Getenv(envQueue), Cut: os.Getenv(envCut) == "1", Quiet: os.Getenv(envQuiet) == "1"}
	var errs []error
	num := func(name string) int {
		n, err := strconv.Atoi(os.Getenv(name))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		return n
	}
	s.Worker, s.Concurrency, s.MaxAttempts = num(envWorker), num(envConcurrency), num(envMaxAttempts)
	d, err := time.ParseDuration(os.Getenv(envHandlerDelay))
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", envHandlerDelay, err))
	}
	s.HandlerDelay = d
	for name, d := range map[string]*time.Duration{envReportDelay: &s.ReportDelay, envLateHeal: &s.LateHeal} {
		if v := os.Getenv(name); v != "" {
			if *d, err = time.ParseDuration(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	if s.URL == "" || s.Queue == "" {
		errs = append(errs, errors.New("faultsuite: worker without a URL or a queue"))
	}
	return s, errors.Join(errs...)
}

// Switch cuts a transport's connections and lets them through again: a
// faultproxy.Proxy does.
type Switch interface {
	Down()
	Up()
}

// Freezer is a [Switch] that can also turn into a black hole, which the blackhole
// scenarios need (checked with a type assertion): a faultproxy.Proxy is one.
type Freezer interface {
	Switch
	// Freeze keeps every connection open and lets no byte through, new ones too.
	Freeze()
	// Thaw lets bytes through again, what was sent meanwhile first.
	Thaw()
	// Strand lets new connections through and leaves the ones open now frozen for
	// good.
	Strand()
}

// Opener opens a worker's transport for spec. With spec.Cut it also returns the
// [Switch] every connection of the transport goes through; otherwise the switch may be
// nil. ctx carries the worker's logger (transport.LoggerFrom).
type Opener func(ctx context.Context, spec WorkerSpec) (transport.Transport, Switch, error)

// WorkerMain runs this process as a worker of the run described by its environment and
// returns its exit code: it opens the transport with open, consumes the queue with the
// runtime (dead-lettering on), reports [Event] lines on standard output and obeys the
// commands on standard input until told to stop. Its logs go to standard error.
func WorkerMain(open Opener) int {
	spec, err := specFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := runWorker(context.Background(), spec, open, os.Stdin, os.Stdout, log); err != nil {
		log.Error("faultsuite: worker failed", "worker", spec.Worker, "error", err)
		return 1
	}
	return 0
}

func runWorker(ctx context.Context, spec WorkerSpec, open Opener, in io.Reader, out io.Writer, log *slog.Logger) error {
	em := &emitter{w: out, worker: spec.Worker}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	tr, sw, err := open(transport.ContextWithLogger(ctx, log), spec)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(cctx)
	}()
	if spec.Cut && sw == nil {
		return errors.New("the opener gave no switch for a cut run")
	}
	a, err := babelqueue.New(tr, babelqueue.WithQueue(spec.Queue), babelqueue.WithDeadLetter(true),
		babelqueue.WithMaxAttempts(spec.MaxAttempts), babelqueue.WithConcurrency(spec.Concurrency),
		babelqueue.WithShutdownGrace(5*time.Second), babelqueue.WithLogger(log), babelqueue.WithObserver(observer{em: em, delay: spec.ReportDelay, quiet: spec.Quiet}))
	if err != nil {
		return err
	}
	babelqueue.Handle(a, URNGood, func(ctx context.Context, p Payload, m *babelqueue.Message) error {
		lat := latency(p)
		if spec.HandlerDelay > 0 {
			t := time.NewTimer(spec.HandlerDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		em.emit(Event{Ev: EvHandled, ID: m.Envelope.Meta.ID, N: p.N, Attempts: m.Attempts, Lat: lat})
		return nil
	})
	babelqueue.Handle(a, URNFail, func(_ context.Context, p Payload, m *babelqueue.Message) error {
		em.emit(Event{Ev: EvTried, ID: m.Envelope.Meta.ID, N: p.N, Attempts: m.Attempts, Lat: latency(p)})
		return fmt.Errorf("refused %d", p.N)
	})
	babelqueue.Handle(a, URNFlaky, func(_ context.Context, p Payload, m *babelqueue.Message) error {
		lat := latency(p)
		if m.Attempts == 0 {
			em.emit(Event{Ev: EvTried, ID: m.Envelope.Meta.ID, N: p.N, Attempts: m.Attempts, Lat: lat})
			return fmt.Errorf("refused %d once", p.N)
		}
		em.emit(Event{Ev: EvHandled, ID: m.Envelope.Meta.ID, N: p.N, Attempts: m.Attempts, Lat: lat})
		return nil
	})

	// Commands: cut, heal, stop; the end of input stops the worker.
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			switch sc.Text() {
			case cmdCut:
				if sw != nil {
					sw.Down()
				}
				em.emit(Event{Ev: EvCut})
			case cmdHeal:
				switch {
				case sw == nil:
				case spec.LateHeal > 0:
					time.AfterFunc(spec.LateHeal, sw.Up)
				default:
					sw.Up()
				}
				em.emit(Event{Ev: EvHealed})
			case cmdFreeze, cmdThaw, cmdStrand:
				ack := Event{Ev: EvThawed}
				if sc.Text() == cmdFreeze {
					ack.Ev = EvFrozen
				}
				switch f, ok := sw.(Freezer); {
				case !ok:
					ack.Err = fmt.Sprintf("the transport's switch (%T) cannot freeze connections", sw)
				case sc.Text() == cmdFreeze:
					f.Freeze()
				case sc.Text() == cmdThaw:
					f.Thaw()
				default:
					f.Strand()
				}
				em.emit(ack)
			case cmdSample:
				em.emit(Event{Ev: EvSample, Rt: readRuntime()})
			case cmdStop:
				stop()
				return
			}
		}
		stop()
	}()
	// Ready once the runtime consumes.
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if a.Health().Consuming {
					em.emit(Event{Ev: EvReady})
					return
				}
			}
		}
	}()
	err = a.Run(ctx)
	time.Sleep(spec.ReportDelay) // the last settlements' reports go out first
	em.emit(Event{Ev: EvStopped})
	return err
}

// latency is how long after its publish a handler that starts now started; 0 when
// the payload has no publish time.
func latency(p Payload) int64 {
	if p.At == 0 {
		return 0
	}
	return max(time.Now().UnixNano()-p.At, 1)
}

// runtimeMetrics are the runtime/metrics samples of [Runtime], in its fields' order.
var runtimeMetrics = []string{"/gc/heap/live:bytes", "/memory/classes/heap/objects:bytes",
	"/sched/goroutines:goroutines", "/memory/classes/total:bytes"}

// readRuntime reads what the Go runtime says of this process.
func readRuntime() *Runtime {
	s := make([]metrics.Sample, len(runtimeMetrics))
	for i, name := range runtimeMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0 // a metric this Go does not have
		}
		return s[i].Value.Uint64()
	}
	return &Runtime{HeapLive: v(0), HeapObjects: v(1), Goroutines: v(2), Total: v(3)}
}

// observer reports the runtime's receptions, settlements and receive errors; with a
// delay, settlements are reported that much later, off the runtime's goroutine, with
// the time they happened. A quiet one reports only the settlements that failed and
// the receive errors.
type observer struct {
	em    *emitter
	delay time.Duration
	quiet bool
}

func (o observer) OnReceive(_ context.Context, d babelqueue.DeliveryInfo) {
	if o.quiet {
		return
	}
	o.em.emit(Event{Ev: EvReceived, ID: d.ID, Attempts: d.Attempts})
}

func (o observer) OnSettled(_ context.Context, e babelqueue.SettledEvent) {
	if o.quiet && e.Err == nil {
		return
	}
	ev := Event{Ev: EvSettled, ID: e.Delivery.ID, Kind: string(e.Kind), Action: string(e.Action), Reason: e.Reason,
		Attempts: e.Attempts, Took: int64(e.Duration), At: time.Now().UnixNano()}
	if e.Err != nil {
		ev.Err = e.Err.Error()
	}
	if o.delay > 0 {
		time.AfterFunc(o.delay, func() { o.em.emit(ev) })
		return
	}
	o.em.emit(ev)
}

func (o observer) OnReceiveError(_ context.Context, e babelqueue.ReceiveErrorEvent) {
	o.em.emit(Event{Ev: EvRecvErr, Err: e.Err.Error()})
}
