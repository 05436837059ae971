package faultsuite

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
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

// Scenario is a fault the suite injects.
type Scenario string

// The scenarios.
const (
	// Kill sends SIGKILL to the worker that holds the most unsettled deliveries, and
	// starts a replacement after the fault's duration (a supervisor would).
	Kill Scenario = "worker SIGKILL"
	// Cut cuts every connection of every worker through a loopback TCP proxy and lets
	// them through again after the fault's duration.
	Cut Scenario = "connection cut"
	// Restart stops a private broker (the binding's Stop) and starts it again on the
	// same data after the fault's duration.
	Restart Scenario = "broker restart"
	// DLQFailure makes the broker refuse the dead-letter writes (the binding's
	// BreakDLQ) for the fault's duration.
	DLQFailure Scenario = "DLQ write failure"
	// Blackhole freezes every connection of every worker through the loopback TCP
	// proxy (they stay open, no byte passes; new ones are frozen too) and thaws them
	// after the fault's duration: what was sent meanwhile then arrives.
	Blackhole Scenario = "connection blackhole"
	// BlackholeForever freezes every connection of every worker as Blackhole does, and
	// after the fault's duration lets new connections through while the frozen ones
	// stay frozen for good: the consumers must find them dead (heartbeats, keepalives,
	// read deadlines), drop them and resume on fresh ones.
	BlackholeForever Scenario = "connection blackhole, never healed"
)

// Scenarios lists every scenario, in the order of the report.
var Scenarios = []Scenario{Kill, Cut, Blackhole, BlackholeForever, Restart, DLQFailure}

// DetectBound is the longest a consumer may take to find a silent connection dead
// (issue 38: 10 s by default on every broker), from the freeze.
const DetectBound = 10 * time.Second

// Slug is the scenario's short name: kill, cut, blackhole, blackhole-forever, restart
// or dlq.
func (s Scenario) Slug() string {
	switch s {
	case Kill:
		return "kill"
	case Cut:
		return "cut"
	case Blackhole:
		return "blackhole"
	case BlackholeForever:
		return "blackhole-forever"
	case Restart:
		return "restart"
	case DLQFailure:
		return "dlq"
	}
	return "run"
}

// throughSwitch reports whether s is made by the switch every connection of the
// workers goes through (the binding's Cut, or each worker's own).
func (s Scenario) throughSwitch() bool {
	return s == Cut || s == Blackhole || s == BlackholeForever
}

// blackhole reports whether s freezes connections.
func (s Scenario) blackhole() bool { return s == Blackhole || s == BlackholeForever }

// Role says who opens a broker URL: the run's publisher, a worker, or the reader of
// the dead-letter queue.
type Role int

// The roles.
const (
	RolePublisher Role = iota
	RoleWorker
	RoleReader
)

// Binding is what the engine needs to know of a broker. Name and URL are required; the
// rest is needed by the scenarios that use it.
type Binding struct {
	// Name names the broker in the report: "Redis".
	Name string
	// URL returns the broker URL role opens for a run on queue (a Kafka consumer
	// group per run and role, say).
	URL func(role Role, queue string) string
	// Prepare readies the queues of a run before anything is published (Kafka: the
	// topics, with a partition per worker). Optional.
	Prepare func(ctx context.Context, queue, dlq string) error
	// PadFailing pads the failing messages' data with that many bytes (a dead-letter
	// refusal by size needs dead letters larger than the good messages).
	PadFailing int

	// BreakDLQ makes the broker refuse writes to dlq and returns how to heal it.
	// DLQMethod says how, for the report. DLQDestructive says that breaking deletes
	// what the dead-letter queue held: dead letters confirmed before the break that
	// the run had not read yet are counted as destroyed, not missing.
	BreakDLQ       func(ctx context.Context, queue, dlq string) (heal func(context.Context) error, err error)
	DLQMethod      string
	DLQDestructive bool

	// Cut, when set, is the switch of a proxy between the workers and the broker (the
	// worker URL goes through it), flipped by the run itself; otherwise each worker
	// cuts its own connections (its Opener's switch). The blackhole scenarios need a
	// switch that is also a [Freezer].
	Cut       Switch
	CutMethod string
	// OpenPublisher, when set, opens the run's publisher for a Cut run so that its
	// connections are cut with the workers' (spec as a worker's, with the publisher's
	// URL): where Cut is nil it returns the switch the run flips together with the
	// workers'; where Cut is set the publisher's connections must go through Cut (the
	// switch it returns is not used). Without it the publisher is not cut;
	// PublisherUncut says why, for the report.
	OpenPublisher  Opener
	PublisherUncut string

	// Stop and Start stop and start again the private broker the URLs point at, with
	// its data; RestartMethod says how, for the report.
	Stop, Start   func() error
	RestartMethod string

	// Bounds are the longest acceptable recovery per scenario (5 s when not given):
	// for Kill, the broker's take-back setting (a session timeout, a visibility
	// timeout, retry_after).
	Bounds map[Scenario]time.Duration
	// Duplicates returns the most duplicates the broker's documented guarantee allows
	// in a run of plan p (docs/reliability.md, "Duplicates: the bound of each broker"),
	// and what the figure is made of; 0 where it states none for p.Scenario. A run
	// with more fails.
	Duplicates func(p Plan) (bound int, of string)
	// Settings says which settings of the run bound duplicates and recovery, for the
	// report.
	Settings string
}

// DefaultBound is the longest acceptable recovery of a scenario that has no bound of
// its binding: the consumers resume within 5 s of the broker coming back.
const DefaultBound = 5 * time.Second

// Bound returns the longest acceptable recovery of s: for BlackholeForever, measured
// from the heal, DetectBound (the frozen connections must be found dead first) plus
// DefaultBound unless the binding says otherwise.
func (b *Binding) Bound(s Scenario) time.Duration {
	if d, ok := b.Bounds[s]; ok {
		return d
	}
	if s == BlackholeForever {
		return DetectBound + DefaultBound
	}
	return DefaultBound
}

// Affected returns how many consumers a fault of plan p strikes, for a duplicate bound
// stated per consumer: the killed worker, or every worker (a cut, a blackhole, a
// restart); 0 for a refused dead-letter queue, whose duplicates no consumer's window
// bounds (each refused write rewinds its delivery, handled again when it comes back).
func Affected(p Plan) int {
	switch p.Scenario {
	case Kill:
		return 1
	case DLQFailure:
		return 0
	}
	return p.Workers
}

// HandOutRate is how many deliveries per second one worker of plan p can take at most:
// its Concurrency handlers each take a good message in HandlerDelay, and for every
// FailEvery-1 good messages a failing one comes MaxAttempts times, at no cost.
func HandOutRate(p Plan) float64 {
	if p.HandlerDelay <= 0 || p.FailEvery < 2 {
		return 0
	}
	good := float64(p.Concurrency) / p.HandlerDelay.Seconds()
	return good * float64(p.FailEvery-1+p.MaxAttempts) / float64(p.FailEvery-1)
}

// Supports reports whether the binding can run s.
func (b *Binding) Supports(s Scenario) bool {
	switch s {
	case Restart:
		return b.Stop != nil && b.Start != nil
	case DLQFailure:
		return b.BreakDLQ != nil
	case Blackhole, BlackholeForever:
		if b.Cut != nil {
			_, ok := b.Cut.(Freezer)
			return ok
		}
	}
	return true
}

// Plan is the shape of a run.
type Plan struct {
	Scenario Scenario
	// Messages are published at Rate per second; every FailEvery-th one fails into
	// the dead-letter queue after MaxAttempts tries.
	Messages, Rate, FailEvery, MaxAttempts int
	// Workers are the worker processes, each with Concurrency runtime goroutines;
	// a good message's handler works HandlerDelay.
	Workers, Concurrency int
	HandlerDelay         time.Duration
	// Down is how long the fault lasts (at least): from the kill to the replacement,
	// from the cut to the heal, from the stop to the start, from the break to the heal.
	Down time.Duration
	// Drain bounds the wait, after the last publish, for every message to be
	// accounted for; Linger is the wait after that for late duplicates.
	Drain, Linger time.Duration
	// ReportDelay makes the workers report each settlement that much later (zero in
	// Short and Full): a kill then lands, every time, on settlements the broker has
	// and the run was not told of, the case a killed worker's last instants make
	// once in a while, which the queue's residue decides.
	ReportDelay time.Duration
	// LateHeal makes the first worker let its connections through again that much
	// after a cut heals (zero in Short and Full; only where each worker cuts its own
	// connections): a worker back after the stream's last message, which the run's
	// probes must still see come back.
	LateHeal time.Duration
}

// Short is the plan of the short form (make test, CI): 300 messages, 4 workers; a
// fault lasts 3 s, a cut 5 s (a publisher must ride out a cut that long).
func Short(s Scenario) Plan {
	down := 3 * time.Second
	if s == Cut {
		down = 5 * time.Second // the publisher rides out a 5 s cut (issue 38)
	}
	return Plan{Scenario: s, Messages: 300, Rate: 100, FailEvery: 10, MaxAttempts: 3, Workers: 4, Concurrency: 2,
		HandlerDelay: 20 * time.Millisecond, Down: down, Drain: 90 * time.Second, Linger: time.Second}
}

// Full is the plan of the full form (make faults): 3,000 messages, 4 workers, one in
// ten failing into the dead-letter queue. A blackhole that heals lasts 15 s, past
// DetectBound, so that consumers that find their connections dead reconnect into it.
func Full(s Scenario) Plan {
	down := 5 * time.Second
	if s == Blackhole {
		down = 15 * time.Second
	}
	return Plan{Scenario: s, Messages: 3000, Rate: 200, FailEvery: 10, MaxAttempts: 3, Workers: 4, Concurrency: 2,
		HandlerDelay: 20 * time.Millisecond, Down: down, Drain: 3 * time.Minute, Linger: 2 * time.Second}
}

// Env is how a run reaches outside the engine.
type Env struct {
	// Spawn returns the command of a worker process (the test binary again, whose
	// TestMain calls WorkerMain when IsWorker). The engine adds the run's environment
	// to the command's, and sets its standard streams.
	Spawn func() *exec.Cmd
	// Logf writes a line to the test log.
	Logf func(format string, args ...any)
	// Dir receives the log files of the run's processes (one per worker and one of
	// the run's own transports).
	Dir string
}

// Run runs plan p on b and returns its account. Its error is about the run itself (a
// worker that would not start, a fault the binding could not make); what the account
// says (missing messages, a stall) is for the caller to judge.
func Run(ctx context.Context, b *Binding, p Plan, env Env) (*Result, error) {
	if !b.Supports(p.Scenario) {
		return nil, fmt.Errorf("faultsuite: %s cannot run %s", b.Name, p.Scenario)
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	r := &run{b: b, p: p, env: env, queue: "bqfaults-" + p.Scenario.Slug() + "-" + hex.EncodeToString(suffix[:])}
	r.led = NewLedger(r.queue)
	r.acct = r.led
	return r.run(ctx)
}

// account is what keeps the books of a run as its messages go: a fault run's [Ledger],
// which remembers every event, or a soak run's tally, which counts them.
type account interface {
	// Published records message n, with meta.id id, before its publish.
	Published(id string, n int, failing bool)
	// Retried records a publish made again with the same bytes.
	Retried()
	// Apply records an event a worker reported.
	Apply(ev Event)
	// DeadLetter records a body read from the dead-letter queue.
	DeadLetter(body []byte)
	// Problem records something that must not happen.
	Problem(format string, args ...any)
}

type run struct {
	b     *Binding
	p     Plan
	env   Env
	queue string
	dlq   string
	led   *Ledger // a fault run's
	acct  account // the books the workers' events, the publishes and the dead letters go to
	log   *slog.Logger
	// quiet starts the workers quiet (WorkerSpec.Quiet), observe is told of each event
	// of a worker after the books (a soak run's samples).
	quiet   bool
	observe func(p *proc, ev Event)

	mu    sync.Mutex
	procs []*proc

	// The fault's timeline and what it left.
	injected, healed time.Time
	victim           *proc
	orphans          []string
	// takenBack is when another worker settled the last orphan it settled, unsettled
	// the orphans nobody settled (Kill only, read once the workers stopped); residue
	// is what the queue then held (only when some are unsettled), residueErr why it
	// could not be counted.
	takenBack  time.Time
	unsettled  []string
	residue    *transport.QueueStats
	residueErr error
	dlqHeal    func(context.Context) error
	notes      []string

	// The publisher's side of a Cut: pubSwitch is its own switch (nil where the
	// binding's Cut carries it, or where it is not cut); pubCut says it is cut.
	pubSwitch Switch
	pubCut    bool
	pubs      publishStats
}

// publishStats is what the run's Publish calls did, the calls made while the
// publisher was cut apart.
type publishStats struct {
	faultOn atomic.Bool // the publisher's connections are cut now

	mu        sync.Mutex
	calls     int           // Publish calls
	inFault   int           // calls begun or ended while the publisher was cut
	errors    int           // calls that returned an error
	inFaultOK int           // calls in the fault that returned nil
	firstErr  string        // the first error
	longest   time.Duration // the longest call
}

// record counts one Publish call that began at start and returned err.
func (ps *publishStats) record(start time.Time, began bool, err error) {
	took := time.Since(start)
	during := began || ps.faultOn.Load()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.calls++
	ps.longest = max(ps.longest, took)
	if during {
		ps.inFault++
		if err == nil {
			ps.inFaultOK++
		}
	}
	if err != nil {
		if ps.errors == 0 {
			ps.firstErr = err.Error()
		}
		ps.errors++
	}
}

func (r *run) notef(format string, args ...any) {
	r.mu.Lock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *run) run(ctx context.Context) (*Result, error) {
	started := time.Now()
	logf, err := os.Create(filepath.Join(r.env.Dir, r.queue+"-run.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	r.log = slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tctx := transport.ContextWithLogger(ctx, r.log)

	pub, err := r.openPublisher(tctx)
	if err != nil {
		return nil, fmt.Errorf("open the publisher: %w", err)
	}
	defer closeTransport(pub)
	if c, ok := r.pubSwitch.(io.Closer); ok {
		defer c.Close()
	}
	app, err := babelqueue.New(pub, babelqueue.WithQueue(r.queue), babelqueue.WithDeadLetter(true), babelqueue.WithLogger(r.log))
	if err != nil {
		return nil, err
	}
	r.dlq = app.DeadLetterQueue()
	if r.b.Prepare != nil {
		if err := r.b.Prepare(ctx, r.queue, r.dlq); err != nil {
			return nil, fmt.Errorf("prepare %s: %w", r.queue, err)
		}
	}

	// The dead-letter queue's reader, on a transport of its own.
	rd, err := transport.Open(tctx, r.b.URL(RoleReader, r.queue))
	if err != nil {
		return nil, fmt.Errorf("open the dead-letter reader: %w", err)
	}
	defer closeTransport(rd)
	rctx, stopReader := context.WithCancel(ctx)
	readerDone := make(chan struct{})
	go func() { defer close(readerDone); r.readDLQ(rctx, rd) }()
	defer func() { stopReader(); <-readerDone }()

	defer r.killAll()
	for range r.p.Workers {
		if _, err := r.startWorker(ctx); err != nil {
			return nil, err
		}
	}

	// The stream: a third, the fault, a third beside it, the heal, the last third.
	third := r.p.Messages / 3
	pace := newPacer(r.p.Rate)
	publish := func(from, to int) error {
		for i := from; i < to; i++ {
			pace.wait(ctx)
			if err := r.publish(ctx, pub, app, i); err != nil {
				return err
			}
		}
		return nil
	}
	if err := publish(0, third); err != nil {
		return nil, err
	}
	faultDone := make(chan error, 1)
	if err := r.inject(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", r.p.Scenario, err)
	}
	go func() { faultDone <- r.heal(ctx) }()
	if err := publish(third, 2*third); err != nil {
		return nil, err
	}
	if err := <-faultDone; err != nil {
		return nil, fmt.Errorf("%s (heal): %w", r.p.Scenario, err)
	}
	if err := publish(2*third, r.p.Messages); err != nil {
		return nil, err
	}
	if err := r.probe(ctx, pub, app); err != nil {
		return nil, err
	}
	published := time.Now()

	// Every meta.id accounted for, or the drain's deadline.
	deadline := published.Add(r.p.Drain)
	for !r.led.Complete() && time.Now().Before(deadline) && ctx.Err() == nil {
		sleep(ctx, 100*time.Millisecond)
	}
	complete := r.led.Complete()
	if complete {
		sleep(ctx, r.p.Linger)
	} else {
		r.notef("not every message was accounted for %s after the last publish", r.p.Drain)
	}
	drained := time.Now()
	r.stopWorkers()
	stopReader()
	<-readerDone
	if r.p.Scenario == Kill && r.victim != nil {
		r.takenBack, r.unsettled = r.led.TakenBack(r.victim.idx, r.orphans, r.injected)
		if len(r.unsettled) > 0 {
			r.residue, r.residueErr = r.countResidue(tctx)
		}
	}
	return r.result(started, published, drained), nil
}

// openPublisher opens the run's publisher: for a Cut run through the binding's
// OpenPublisher when it has one, so that the cut takes the publisher's connections
// too.
func (r *run) openPublisher(ctx context.Context) (transport.Transport, error) {
	url := r.b.URL(RolePublisher, r.queue)
	if r.p.Scenario != Cut || r.b.OpenPublisher == nil {
		return transport.Open(ctx, url)
	}
	tr, sw, err := r.b.OpenPublisher(ctx, WorkerSpec{Broker: r.b.Name, URL: url, Queue: r.queue, Worker: -1, Cut: r.b.Cut == nil})
	if err != nil {
		return nil, err
	}
	if r.b.Cut == nil {
		if sw == nil {
			_ = tr.Close(ctx)
			return nil, errors.New("the binding's OpenPublisher gave no switch")
		}
		r.pubSwitch = sw
	}
	r.pubCut = true
	return tr, nil
}

// publish publishes message i of the stream (every FailEvery-th one failing), with the
// same bytes again until the broker takes it.
func (r *run) publish(ctx context.Context, tr transport.Transport, app *babelqueue.App, i int) error {
	urn := URNGood
	if (i+1)%r.p.FailEvery == 0 {
		urn = URNFail
	}
	return r.publishAs(ctx, tr, app, i, urn)
}

// publishAs publishes message i of the URN urn (URNGood, URNFail or URNFlaky), its
// publish time in its data.
func (r *run) publishAs(ctx context.Context, tr transport.Transport, app *babelqueue.App, i int, urn string) error {
	failing := urn == URNFail
	data := Payload{N: i, At: time.Now().UnixNano()}
	if failing {
		data.Pad = strings.Repeat("x", r.b.PadFailing)
	}
	m, err := app.Prepare(ctx, urn, data, babelqueue.WithKey([]byte(strconv.Itoa(i))))
	if err != nil {
		return err
	}
	r.acct.Published(m.Projection.MessageID, i, failing)
	for first := true; ; first = false {
		pctx, cancel := context.WithTimeout(ctx, PublishTimeout)
		start, began := time.Now(), r.pubs.faultOn.Load()
		err := tr.Publish(pctx, m)
		cancel()
		r.pubs.record(start, began, err)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if first {
			r.log.Warn("faultsuite: publish failed; publishing the same bytes again", "n", i, "error", err)
		}
		r.acct.Retried()
		sleep(ctx, 100*time.Millisecond)
	}
}

// PublishTimeout is the context of each Publish call of a run: time enough to ride
// out a cut of the publisher's connections (issue 38), which a transport must within
// its context and its own default bound.
const PublishTimeout = 30 * time.Second

// probeEvery is the pace of the probes (see probe).
const probeEvery = 100 * time.Millisecond

// probe keeps work on the queue after the stream while a worker that was running
// through a cut or a restart has not settled anything since the heal: a worker whose
// backoff brings it back after the stream's last message (a short run's last third
// lasts a second; a reconnection backs off up to seconds) would otherwise have nothing
// left to settle, and could not be told from one that never came back. It publishes
// one more good message every probeEvery until each of them settled again, or until
// twice the scenario's bound after the heal (the longest the run accepts).
func (r *run) probe(ctx context.Context, tr transport.Transport, app *babelqueue.App) error {
	if !r.p.Scenario.throughSwitch() && r.p.Scenario != Restart {
		return nil
	}
	deadline := r.healed.Add(2 * r.b.Bound(r.p.Scenario))
	probes := 0
	for i := r.p.Messages; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		lagging := 0
		for _, p := range r.live() {
			if p.startedAt.After(r.healed) {
				continue
			}
			if _, ok := r.led.FirstSettleAfter(p.idx, r.healed); !ok {
				lagging++
			}
		}
		if lagging == 0 {
			break
		}
		if err := r.publishAs(ctx, tr, app, i, URNGood); err != nil {
			return err
		}
		probes++
		sleep(ctx, probeEvery)
	}
	if probes > 0 {
		r.notef("%d probe messages published after the stream, until every worker running through the fault settled again", probes)
	}
	return nil
}

// readDLQ reads the dead-letter queue until ctx ends, acknowledging what it reads. A
// dead letter whose acknowledgement failed comes back: that copy is not counted.
func (r *run) readDLQ(ctx context.Context, tr transport.Transport) {
	ackFailed := map[string]bool{}
	for ctx.Err() == nil {
		c, err := tr.Consume(ctx, r.dlq, transport.ConsumeOptions{Prefetch: 16})
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("faultsuite: consuming the dead-letter queue", "error", err)
				sleep(ctx, 500*time.Millisecond)
			}
			continue
		}
		for ctx.Err() == nil {
			d, err := c.Receive(ctx)
			if err != nil {
				if errors.Is(err, transport.ErrClosed) {
					break
				}
				sleep(ctx, 200*time.Millisecond)
				continue
			}
			id := ""
			if env, err := envelope.Decode(d.Body); err == nil {
				id = env.Meta.ID
			}
			if ackFailed[id] {
				delete(ackFailed, id)
			} else {
				r.acct.DeadLetter(d.Body)
			}
			if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil && ctx.Err() == nil {
				ackFailed[id] = true
			}
		}
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = c.Close(cctx)
		cancel()
	}
}

// inject makes the fault.
func (r *run) inject(ctx context.Context) error {
	r.injected = time.Now()
	switch r.p.Scenario {
	case Kill:
		// The victim is the worker holding the most deliveries, once one holds some.
		var victim *proc
		for wait := time.Now().Add(2 * time.Second); ; {
			most := 0
			for _, p := range r.live() {
				if n := len(r.led.InFlight(p.idx)); n > most || victim == nil {
					victim, most = p, n
				}
			}
			if most > 0 || time.Now().After(wait) {
				break
			}
			sleep(ctx, 5*time.Millisecond)
		}
		if victim == nil {
			return errors.New("no worker is running")
		}
		r.injected = time.Now()
		victim.kill()
		<-victim.exited // every line it wrote is read
		r.victim, r.orphans = victim, r.led.InFlight(victim.idx)
		r.notef("killed worker %d holding %d deliveries", victim.idx, len(r.orphans))
	case Cut:
		if r.pubCut {
			r.pubs.faultOn.Store(true)
		}
		if r.pubSwitch != nil {
			r.pubSwitch.Down()
		}
		if r.b.Cut != nil {
			r.b.Cut.Down()
			r.injected = time.Now()
			return nil
		}
		at, err := r.command(cmdCut, EvCut)
		r.injected = at
		return err
	case Blackhole, BlackholeForever:
		if r.b.Cut != nil {
			r.b.Cut.(Freezer).Freeze()
			r.injected = time.Now()
			return nil
		}
		at, err := r.command(cmdFreeze, EvFrozen)
		r.injected = at
		return err
	case Restart:
		if err := r.b.Stop(); err != nil {
			return err
		}
		r.notef("broker stopped in %s", time.Since(r.injected).Round(time.Millisecond))
	case DLQFailure:
		if r.b.DLQDestructive {
			// Read what the dead-letter queue holds before it goes.
			for wait := time.Now().Add(5 * time.Second); !r.led.DeadLettersRead() && time.Now().Before(wait); {
				sleep(ctx, 20*time.Millisecond)
			}
		}
		heal, err := r.b.BreakDLQ(ctx, r.queue, r.dlq)
		if err != nil {
			return err
		}
		r.dlqHeal = heal
		if r.b.DLQDestructive {
			if n := r.led.Destroyed(time.Now()); n > 0 {
				r.notef("%d dead letters confirmed before the dead-letter queue was deleted were not read yet (destroyed by the fault)", n)
			}
		}
	}
	return nil
}

// heal ends the fault once it has lasted Down, and records when the broker (or the
// connection, or the dead-letter queue) was back.
func (r *run) heal(ctx context.Context) error {
	sleep(ctx, time.Until(r.injected.Add(r.p.Down)))
	switch r.p.Scenario {
	case Kill:
		r.healed = time.Now()
		p, err := r.startWorker(ctx)
		if err != nil {
			return err
		}
		r.notef("replacement worker %d consuming %s after the kill", p.idx, time.Since(r.injected).Round(time.Millisecond))
	case Cut:
		defer r.pubs.faultOn.Store(false)
		if r.b.Cut != nil {
			r.b.Cut.Up()
			r.healed = time.Now()
			return nil
		}
		at, err := r.command(cmdHeal, EvHealed)
		r.healed = at
		if r.pubSwitch != nil {
			r.pubSwitch.Up() // after the workers': the publisher's cut lasts at least as long
		}
		return err
	case Blackhole, BlackholeForever:
		cmd := cmdThaw
		if r.p.Scenario == BlackholeForever {
			cmd = cmdStrand
		}
		if r.b.Cut != nil {
			if f := r.b.Cut.(Freezer); cmd == cmdThaw {
				f.Thaw()
			} else {
				f.Strand()
			}
			r.healed = time.Now()
			return nil
		}
		at, err := r.command(cmd, EvThawed)
		r.healed = at
		return err
	case Restart:
		if err := r.b.Start(); err != nil {
			return err
		}
		r.healed = time.Now()
		r.notef("broker back %s after the stop began", r.healed.Sub(r.injected).Round(time.Millisecond))
	case DLQFailure:
		if err := r.dlqHeal(ctx); err != nil {
			return err
		}
		r.healed = time.Now()
	}
	return nil
}

// command sends cmd to every live worker and waits for each to acknowledge it with
// ack; it returns the last acknowledgement's time, the fault's. A worker that
// acknowledges with an error (a switch that cannot freeze) fails the command.
func (r *run) command(cmd, ack string) (time.Time, error) {
	last := time.Now()
	for _, p := range r.live() {
		if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
			return last, fmt.Errorf("worker %d: %w", p.idx, err)
		}
	}
	for _, p := range r.live() {
		select {
		case ev := <-p.acks[ack]:
			if ev.Err != "" {
				return last, fmt.Errorf("worker %d: %s: %s", p.idx, cmd, ev.Err)
			}
			if at := ev.Time(); at.After(last) {
				last = at
			}
		case <-p.exited:
			return last, fmt.Errorf("worker %d exited before acknowledging %s", p.idx, cmd)
		case <-time.After(10 * time.Second):
			return last, fmt.Errorf("worker %d did not acknowledge %s within 10s", p.idx, cmd)
		}
	}
	return last, nil
}

// Result is the account of one run.
type Result struct {
	Broker   string   `json:"broker"`
	Scenario Scenario `json:"scenario"`
	// Form is "short" or "full".
	Form    string `json:"form,omitempty"`
	Workers int    `json:"workers"`

	Published    int `json:"published"`
	Handled      int `json:"handled"`
	DeadLettered int `json:"dead_lettered"`
	Destroyed    int `json:"destroyed,omitempty"`
	Missing      int `json:"missing"`
	Duplicates   int `json:"duplicates"`
	// DuplicateBound is the most duplicates the binding's documented guarantee allows
	// in this run (0: none stated), DuplicateBoundOf what it is made of.
	DuplicateBound   int    `json:"duplicate_bound,omitempty"`
	DuplicateBoundOf string `json:"duplicate_bound_of,omitempty"`
	// Setup names the deployment when it is not the suite's single broker (a cluster
	// test's: "Sentinel, wait=1"), Case the fault when the scenario's name does not
	// say it (a cluster test's: "primary SIGKILL"). Both only label the report.
	Setup string `json:"setup,omitempty"`
	Case  string `json:"case,omitempty"`
	// Judged says the test that ran it judged it by bounds of its own (a cluster test:
	// the pause against the failover it measured), Failed that the test failed it; the
	// report then gives that verdict instead of [Result.Failures].
	Judged bool `json:"judged,omitempty"`
	Failed bool `json:"failed,omitempty"`

	// Recovery is how long the consumers took to recover, RecoveryOf what was
	// measured; Stalled says they did not recover at all. Bound is the longest
	// acceptable recovery.
	Recovery   time.Duration `json:"recovery_ns"`
	RecoveryOf string        `json:"recovery_of"`
	Stalled    bool          `json:"stalled,omitempty"`
	Bound      time.Duration `json:"bound_ns"`
	// Down is how long the fault lasted.
	Down time.Duration `json:"down_ns"`
	// Detection is, in the blackhole scenarios, how long after the freeze the slowest
	// worker found its frozen connections dead: its first failed receive or
	// settlement, or (never healed) its first settlement through a fresh connection if
	// that came first. DetectionOf says what was seen; Undetected that a worker never
	// found them dead (a failure only where they never thaw). DetectBound is the
	// bound.
	Detection   time.Duration `json:"detection_ns,omitempty"`
	DetectionOf string        `json:"detection_of,omitempty"`
	Undetected  bool          `json:"undetected,omitempty"`
	DetectBound time.Duration `json:"detect_bound_ns,omitempty"`

	// FailedSettles (by action) and ReceiveErrors are what the workers saw of the
	// fault: settlements that failed and were rewound, receives that failed.
	// DeadLetteredAgain counts messages dead-lettered more than once (a pipelined
	// dead-letter write that failed after Settle returned); Pause is the longest time
	// in the fault in which no worker settled anything (a whole fault long when every
	// worker stopped; for a refused dead-letter queue, how far the messages that
	// cannot be dead-lettered held up the rest).
	FailedSettles     map[string]int `json:"failed_settles,omitempty"`
	ReceiveErrors     int            `json:"receive_errors,omitempty"`
	DeadLetteredAgain int            `json:"dead_lettered_again,omitempty"`
	Pause             time.Duration  `json:"pause_ns,omitempty"`

	// The run's publisher through a cut (Cut runs whose binding can cut it): PublisherCut
	// says its connections were cut with the workers' (PublisherUncut why not);
	// PublishesInFault counts the Publish calls begun or ended while they were cut,
	// PublishesInFaultOK those of them that returned nil; PublishErrors counts every
	// Publish call of the run that returned an error (each is made again with the same
	// bytes), PublishErrorOf the first one's error; LongestPublish is the longest
	// Publish call of the run.
	PublisherCut       bool          `json:"publisher_cut,omitempty"`
	PublisherUncut     string        `json:"publisher_uncut,omitempty"`
	PublishesInFault   int           `json:"publishes_in_fault,omitempty"`
	PublishesInFaultOK int           `json:"publishes_in_fault_ok,omitempty"`
	PublishErrors      int           `json:"publish_errors,omitempty"`
	PublishErrorOf     string        `json:"publish_error_of,omitempty"`
	LongestPublish     time.Duration `json:"longest_publish_ns,omitempty"`

	Method         string   `json:"method,omitempty"`
	Settings       string   `json:"settings,omitempty"`
	PublishRetries int      `json:"publish_retries,omitempty"`
	MissingN       []int    `json:"missing_n,omitempty"`
	Problems       []string `json:"problems,omitempty"`
	Notes          []string `json:"notes,omitempty"`
	Started        string   `json:"started"`
	Elapsed        float64  `json:"elapsed_s"`
}

// Failures returns what makes the run fail within slack times its bound: a missing
// message, a stall or a recovery past the bound, and every problem.
func (res *Result) Failures(slack float64) []string {
	var out []string
	if res.Missing > 0 {
		out = append(out, fmt.Sprintf("%d messages missing (stream numbers %v)", res.Missing, res.MissingN))
	}
	if limit := int(float64(res.DuplicateBound) * slack); res.DuplicateBound > 0 && res.Duplicates > limit {
		bound := fmt.Sprintf("the documented bound of %d", res.DuplicateBound)
		if limit != res.DuplicateBound {
			bound = fmt.Sprintf("%d, %g times %s", limit, slack, bound)
		}
		out = append(out, fmt.Sprintf("%d duplicates, past %s (%s)", res.Duplicates, bound, res.DuplicateBoundOf))
	}
	switch limit := time.Duration(float64(res.Bound) * slack); {
	case res.Stalled:
		out = append(out, "stalled: "+res.RecoveryOf)
	case res.Recovery > limit:
		out = append(out, fmt.Sprintf("recovered in %s, past %s: %s", res.Recovery.Round(time.Millisecond), limit, res.RecoveryOf))
	}
	if res.Scenario == BlackholeForever {
		switch limit := time.Duration(float64(res.DetectBound) * slack); {
		case res.Undetected:
			out = append(out, "dead connections never found: "+res.DetectionOf)
		case res.Detection > limit:
			out = append(out, fmt.Sprintf("dead connections found in %s, past %s: %s", res.Detection.Round(time.Millisecond), limit, res.DetectionOf))
		}
	}
	if res.PublisherCut && res.PublishErrors > 0 {
		// Each Publish had PublishTimeout: time enough to ride out the cut.
		out = append(out, fmt.Sprintf("%d publishes failed through a cut of %s (each with a %s context), the first with: %s",
			res.PublishErrors, res.Down.Round(time.Millisecond), PublishTimeout, firstLine(res.PublishErrorOf, 300)))
	}
	return append(out, res.Problems...)
}

func (r *run) result(started, published, drained time.Time) *Result {
	c := r.led.Counts()
	res := &Result{
		Broker: r.b.Name, Scenario: r.p.Scenario, Workers: r.p.Workers,
		Published: c.Published, Handled: c.Handled, DeadLettered: c.DeadLettered, Destroyed: c.Destroyed,
		Missing: c.Missing, Duplicates: c.Duplicates, PublishRetries: c.Retries,
		Bound: r.b.Bound(r.p.Scenario), Down: r.healed.Sub(r.injected),
		MissingN: r.led.MissingNumbers(20), Problems: r.led.Problems(),
		Started: started.UTC().Format(time.RFC3339), Elapsed: drained.Sub(started).Round(100 * time.Millisecond).Seconds(),
	}
	switch r.p.Scenario {
	case Kill:
		res.Method = fmt.Sprintf("SIGKILL of the worker holding the most deliveries; a replacement started %s later", seconds(r.p.Down))
		res.Down = r.healed.Sub(r.injected)
		if len(r.orphans) == 0 {
			res.RecoveryOf = "the killed worker held no delivery"
			break
		}
		res.RecoveryOf = fmt.Sprintf("from the SIGKILL until every delivery the killed worker held (%d) was settled by another worker", len(r.orphans))
		unsettled := r.unsettled
		if !r.takenBack.IsZero() {
			res.Recovery = r.takenBack.Sub(r.injected)
		}
		if len(unsettled) == 0 {
			break
		}
		// Nobody settled them: either the killed worker did, and died before it
		// reported it, or the broker still holds them for a consumer that is gone.
		// Only the broker can tell: once every worker stopped, the queue must be
		// empty.
		switch empty := r.residue != nil && residueEmpty(*r.residue); {
		case empty && r.led.Finished(r.victim.idx, unsettled):
			r.notef("%d of them settled by the killed worker itself, whose handler had returned, before it reported it: "+
				"nobody else received them and the queue held nothing once the workers stopped", len(unsettled))
		case r.residueErr != nil:
			res.Stalled = true
			res.RecoveryOf += fmt.Sprintf(" (%d never were, and the queue could not be counted: %v)", len(unsettled), r.residueErr)
		default:
			res.Stalled = true
			res.RecoveryOf += fmt.Sprintf(" (%d never were; the queue held %+v once the workers stopped)", len(unsettled), *r.residue)
		}
	case Cut, Restart, Blackhole, BlackholeForever:
		res.Method = "every connection of every worker cut by a loopback TCP proxy"
		if r.b.CutMethod != "" {
			res.Method = r.b.CutMethod
		}
		res.RecoveryOf = "from the broker being reachable again until every worker settled again"
		switch r.p.Scenario {
		case Restart:
			res.Method = r.b.RestartMethod
		case Blackhole:
			res.Method = fmt.Sprintf("every connection of every worker frozen by a loopback TCP proxy (open, no byte through, "+
				"new ones too) for %s, then thawed: what was sent meanwhile arrives", seconds(r.p.Down))
			res.RecoveryOf = "from the thaw until every worker settled again"
		case BlackholeForever:
			res.Method = fmt.Sprintf("every connection of every worker frozen by a loopback TCP proxy (open, no byte through, "+
				"new ones too) for %s, then new connections let through and the frozen ones left frozen for good", seconds(r.p.Down))
			res.RecoveryOf = "from fresh connections being let through until every worker settled again (on a fresh connection: the frozen ones must be found dead first)"
		}
		if r.p.Scenario.blackhole() {
			r.detection(res)
		}
		var stalled []string
		for _, p := range r.procs {
			if p.killed.Load() || p.startedAt.After(r.healed) {
				continue
			}
			at, ok := r.led.FirstSettleAfter(p.idx, r.healed)
			if !ok {
				stalled = append(stalled, strconv.Itoa(p.idx))
				continue
			}
			res.Recovery = max(res.Recovery, at.Sub(r.healed))
		}
		if len(stalled) > 0 {
			res.Stalled = true
			res.RecoveryOf += " (workers " + strings.Join(stalled, ", ") + " never did)"
		}
	case DLQFailure:
		res.Method = r.b.DLQMethod
		last, n, never := r.led.Refused(r.healed)
		res.RecoveryOf = fmt.Sprintf("from the dead-letter queue taking writes again until every message whose dead-letter write it refused (%d) was dead-lettered", n)
		switch {
		case never > 0:
			res.Stalled = true
			res.RecoveryOf += fmt.Sprintf(" (%d never were)", never)
		case last.After(r.healed):
			res.Recovery = last.Sub(r.healed)
		case n == 0:
			// Nothing was refused: the first dead-letter write after the heal.
			res.RecoveryOf = "from the dead-letter queue taking writes again until the first dead-letter write that held"
			if at, ok := r.led.FirstFinalAfter(babelqueue.ActionDeadLetter, r.healed); ok {
				res.Recovery = at.Sub(r.healed)
			} else {
				res.Stalled = true
			}
		}
	}
	res.Settings = r.b.Settings
	if r.b.Duplicates != nil {
		res.DuplicateBound, res.DuplicateBoundOf = r.b.Duplicates(r.p)
	}
	if r.p.Scenario == Cut {
		res.PublisherCut = r.pubCut
		if !r.pubCut {
			res.PublisherUncut = cmp.Or(r.b.PublisherUncut, "the binding cannot put the publisher behind the cut")
		}
	}
	r.pubs.mu.Lock()
	res.PublishesInFault, res.PublishesInFaultOK = r.pubs.inFault, r.pubs.inFaultOK
	res.PublishErrors, res.PublishErrorOf, res.LongestPublish = r.pubs.errors, r.pubs.firstErr, r.pubs.longest
	r.pubs.mu.Unlock()
	res.FailedSettles, res.ReceiveErrors = c.FailedSettles, c.ReceiveErrors
	// A fault the workers never noticed proves nothing.
	res.DeadLetteredAgain = c.DeadLetteredAgain
	res.Pause = r.led.LongestPause(r.injected, r.healed)
	switch failed := sum(c.FailedSettles); {
	case r.p.Scenario == DLQFailure && c.FailedSettles[string(babelqueue.ActionDeadLetter)]+c.DeadLetteredAgain == 0:
		res.Problems = append(res.Problems, "no dead-letter write failed: the fault did not bite")
	case (r.p.Scenario.throughSwitch() || r.p.Scenario == Restart) && failed+c.ReceiveErrors == 0 && res.Pause < r.p.Down/2:
		res.Problems = append(res.Problems, "no worker saw a failed receive or settlement, nor stopped settling: the fault did not bite")
	}
	for _, p := range r.procs {
		if p.killed.Load() {
			continue
		}
		if p.exitErr != nil {
			res.Problems = append(res.Problems, fmt.Sprintf("worker %d exited with %v; its log: %s", p.idx, p.exitErr, tail(p.logPath, 1500)))
		}
	}
	if c.Retries > 0 {
		r.notef("%d publishes retried", c.Retries)
	}
	r.mu.Lock()
	res.Notes = slices.Clone(r.notes)
	r.mu.Unlock()
	return res
}

// detection fills res's Detection fields: per worker that ran through the freeze, the
// first failed receive or settlement after it, or, where the connections never thaw,
// the first settlement after fresh ones were let through if that came first (a
// transport that dropped its dead connections without reporting a failure).
func (r *run) detection(res *Result) {
	res.DetectBound = DetectBound
	var slowest, what string
	var quiet []string
	for _, p := range r.procs {
		if p.killed.Load() || p.startedAt.After(r.injected) {
			continue
		}
		at, how, ok := r.led.FirstFailureAfter(p.idx, r.injected)
		if r.p.Scenario == BlackholeForever {
			if s, settled := r.led.FirstSettleAfter(p.idx, r.healed); settled && (!ok || s.Before(at)) {
				at, how, ok = s, "a settlement through a fresh connection", true
			}
		} else if ok && at.After(r.healed.Add(time.Second)) {
			ok = false // after the thaw: not what the freeze made it find
		}
		if !ok {
			quiet = append(quiet, strconv.Itoa(p.idx))
			continue
		}
		if d := at.Sub(r.injected); d >= res.Detection {
			res.Detection, slowest, what = d, strconv.Itoa(p.idx), how
		}
	}
	if slowest != "" {
		res.DetectionOf = fmt.Sprintf("from the freeze until the slowest worker (%s) saw %s", slowest, firstLine(what, 160))
	}
	if len(quiet) == 0 {
		return
	}
	if r.p.Scenario == BlackholeForever {
		res.Undetected = true
		res.DetectionOf = strings.TrimPrefix(res.DetectionOf+"; ", "; ") + "workers " + strings.Join(quiet, ", ") +
			" neither failed nor settled after the freeze"
		return
	}
	res.DetectionOf = strings.TrimPrefix(res.DetectionOf+"; ", "; ") + "workers " + strings.Join(quiet, ", ") +
		fmt.Sprintf(" saw no failure before the thaw (%s)", seconds(r.p.Down))
}

// firstLine returns s up to its first line break, cut to n bytes.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// countResidue counts what the queue holds, through a transport opened as a worker
// (a Kafka group's uncommitted records are the worker group's). Counts the broker
// gives approximately (SQS) are read again for a few seconds until they are zero. A
// transport that cannot count is browsed: what it shows is its Ready count.
func (r *run) countResidue(ctx context.Context) (*transport.QueueStats, error) {
	tr, err := transport.Open(ctx, r.b.URL(RoleWorker, r.queue))
	if err != nil {
		return nil, err
	}
	defer closeTransport(tr)
	count := func(ctx context.Context) (transport.QueueStats, error) {
		st, err := transport.Stats(ctx, tr, r.queue)
		b, ok := tr.(transport.Browser)
		if !errors.Is(err, transport.ErrCannotCount) || !ok {
			return st, err
		}
		page, err := b.Browse(ctx, r.queue, "", 1)
		return transport.QueueStats{Exists: true, Ready: int64(len(page.Deliveries)), InFlight: transport.UnknownCount,
			Delayed: transport.UnknownCount, Appended: transport.UnknownCount}, err
	}
	var st transport.QueueStats
	for deadline := time.Now().Add(5 * time.Second); ; {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		st, err = count(cctx)
		cancel()
		if err != nil || residueEmpty(st) || time.Now().After(deadline) {
			break
		}
		sleep(ctx, 250*time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// residueEmpty reports whether st says the queue holds nothing: no message ready,
// delayed or in flight. A count the broker cannot tell is taken as none: where a
// broker cannot count what consumers hold (RabbitMQ, Kafka, a browsed queue), what
// a consumer that is gone held is back in Ready once the broker took it back (its
// connection closed, its group's offsets uncommitted).
func residueEmpty(st transport.QueueStats) bool {
	return st.Ready == 0 && st.InFlight <= 0 && st.Delayed <= 0
}

// proc is one worker process.
type proc struct {
	idx       int
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	logPath   string
	startedAt time.Time
	ready     chan struct{}
	acks      map[string]chan Event
	exited    chan struct{}
	exitErr   error
	killed    atomic.Bool
}

func (p *proc) kill() {
	p.killed.Store(true)
	_ = p.cmd.Process.Kill()
}

func (r *run) live() []*proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*proc
	for _, p := range r.procs {
		select {
		case <-p.exited:
		default:
			if !p.killed.Load() {
				out = append(out, p)
			}
		}
	}
	return out
}

// startWorker starts a worker process and waits until its runtime consumes.
func (r *run) startWorker(ctx context.Context) (*proc, error) {
	r.mu.Lock()
	idx := len(r.procs)
	r.mu.Unlock()
	spec := WorkerSpec{
		Broker: r.b.Name, URL: r.b.URL(RoleWorker, r.queue), Queue: r.queue, Worker: idx,
		Concurrency: r.p.Concurrency, MaxAttempts: r.p.MaxAttempts, HandlerDelay: r.p.HandlerDelay,
		Cut: r.p.Scenario.throughSwitch() && r.b.Cut == nil, ReportDelay: r.p.ReportDelay, Quiet: r.quiet,
	}
	if idx == 0 {
		spec.LateHeal = r.p.LateHeal
	}
	cmd := r.env.Spawn()
	cmd.Env = append(cmd.Environ(), spec.environ()...)
	p := &proc{
		idx: idx, cmd: cmd, logPath: filepath.Join(r.env.Dir, fmt.Sprintf("%s-worker%d.log", r.queue, idx)),
		ready: make(chan struct{}), exited: make(chan struct{}),
		acks: map[string]chan Event{EvCut: make(chan Event, 1), EvHealed: make(chan Event, 1),
			EvFrozen: make(chan Event, 1), EvThawed: make(chan Event, 1)},
	}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		_ = logf.Close()
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		_ = logf.Close()
		return nil, err
	}
	p.startedAt = time.Now()
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start worker %d: %w", idx, err)
	}
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	go func() {
		defer close(p.exited)
		defer logf.Close()
		var once sync.Once
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var ev Event
			if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Ev == "" {
				continue
			}
			r.acct.Apply(ev)
			if r.observe != nil {
				r.observe(p, ev)
			}
			switch ev.Ev {
			case EvReady:
				once.Do(func() { close(p.ready) })
			case EvCut, EvHealed, EvFrozen, EvThawed:
				select {
				case p.acks[ev.Ev] <- ev:
				default:
				}
			}
		}
		p.exitErr = cmd.Wait()
	}()
	select {
	case <-p.ready:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("worker %d exited at start (%v): %s", idx, p.exitErr, tail(p.logPath, 3000))
	case <-time.After(90 * time.Second):
		p.kill()
		return nil, fmt.Errorf("worker %d was not consuming within 90s: %s", idx, tail(p.logPath, 3000))
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	}
}

// stopWorkers tells every live worker to stop and waits for it to exit (30 s, then
// it is killed and that is a problem).
func (r *run) stopWorkers() {
	live := r.live()
	for _, p := range live {
		_, _ = io.WriteString(p.stdin, cmdStop+"\n")
		_ = p.stdin.Close()
	}
	for _, p := range live {
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			r.acct.Problem("worker %d did not stop within 30s of being told to", p.idx)
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
}

// killAll kills what is still running (a run that ended early).
func (r *run) killAll() {
	for _, p := range r.live() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// pacer spaces publishes at a rate, without a burst after a stall.
type pacer struct {
	every time.Duration
	next  time.Time
}

func newPacer(rate int) *pacer { return &pacer{every: time.Second / time.Duration(rate)} }

func (p *pacer) wait(ctx context.Context) {
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	sleep(ctx, p.next.Sub(now))
	p.next = p.next.Add(p.every)
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func closeTransport(tr transport.Transport) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = tr.Close(ctx)
}

// tail returns the last n bytes of the file at path.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
