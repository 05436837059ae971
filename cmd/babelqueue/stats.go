package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/otel/metrics"
	"github.com/babelqueue-go/babelqueue/queuestats"
	"github.com/babelqueue-go/babelqueue/transport"
)

const statsUsage = `babelqueue stats [flags] URL[#queue,queue=dlq,…]…

Print what each queue holds: messages ready, in flight, delayed, in its dead-letter
queue, and how long the oldest ready message has waited (Kafka: per partition, the
group's lag and the age of its first record). The numbers are the ones the console
and the metrics of otel/metrics show (package queuestats). Each URL names its queues
after a # (queue=dlq when the dead-letter queue is not the runtime's default name), or
takes every -queue. A count the broker cannot tell is shown as —.

  -watch            count again every -interval until interrupted (-n rounds at most)
  -listen ADDR      serve the counts as Prometheus gauges on http://ADDR/metrics,
                    counted every -interval (a sidecar exporter for queues no Go
                    process consumes); prints nothing unless -watch

Flags:
`

// statsTarget is one queue on one broker that stats counts.
type statsTarget struct {
	b *broker
	q queuestats.Queue
}

// statsView is one queue's line of stats --json. A count the broker cannot tell is
// null.
type statsQueueView struct {
	At           time.Time            `json:"at"`
	Broker       string               `json:"broker"`
	Queue        string               `json:"queue"`
	DLQ          string               `json:"dlq"`
	Exists       bool                 `json:"exists"`
	Ready        *int64               `json:"ready"`
	InFlight     *int64               `json:"in_flight"`
	Delayed      *int64               `json:"delayed"`
	DeadLettered *int64               `json:"dead_lettered"`
	OldestAgeS   *float64             `json:"oldest_age_seconds"`
	Appended     *int64               `json:"appended"`
	Partitions   []statsPartitionView `json:"partitions,omitempty"`
}

type statsPartitionView struct {
	Partition int32    `json:"partition"`
	Lag       int64    `json:"lag"`
	LagAgeS   *float64 `json:"lag_age_seconds"`
}

func known(n int64) *int64 {
	if n == transport.UnknownCount {
		return nil
	}
	return &n
}

func seconds(d time.Duration, ok bool) *float64 {
	if !ok {
		return nil
	}
	s := d.Seconds()
	return &s
}

func viewSnapshot(broker string, s queuestats.Snapshot) statsQueueView {
	v := statsQueueView{At: s.At.UTC(), Broker: broker, Queue: s.Queue, DLQ: s.DLQ, Exists: s.Stats.Exists,
		Ready: known(s.Stats.Ready), InFlight: known(s.Stats.InFlight), Delayed: known(s.Stats.Delayed),
		DeadLettered: known(s.DeadLettered()), OldestAgeS: seconds(s.OldestAge()), Appended: known(s.Stats.Appended)}
	for _, p := range s.Stats.Partitions {
		v.Partitions = append(v.Partitions, statsPartitionView{Partition: p.Partition, Lag: p.Lag, LagAgeS: seconds(p.LagAge(s.At))})
	}
	return v
}

func statsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := newOut("stats", stdout, stderr)
	fs := o.flags()
	fs.Usage = func() {
		fmt.Fprint(stderr, statsUsage)
		fs.PrintDefaults()
	}
	var queues queuesFlag
	fs.Var(&queues, "queue", "a work queue to count on every URL without its own #queue,… (repeatable; queue=dlq names its dead-letter queue)")
	watch := fs.Bool("watch", false, "count again every -interval until interrupted")
	every := fs.Duration("interval", 5*time.Second, "how often -watch and -listen count")
	rounds := fs.Int("n", 0, "with -watch: stop after this many rounds (0: until interrupted)")
	listen := fs.String("listen", "", "serve the counts as Prometheus gauges on http://ADDR/metrics")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return o.finish(err)
	}
	if len(pos) == 0 {
		return o.finish(usageError{"want at least one broker URL (URL#queue,queue names the queues to count on it)"})
	}
	if *every <= 0 {
		return o.finish(usageError{"-interval must be positive"})
	}
	var targets []statsTarget
	byBroker := map[*broker][]queuestats.Queue{}
	var brokers []*broker
	for _, raw := range pos {
		u, frag := splitFragment(raw)
		names := []string(queues)
		if frag != "" {
			names = strings.Split(frag, ",")
		}
		var qs []queuestats.Queue
		for _, n := range names {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			name, dlq, _ := strings.Cut(n, "=")
			qs = append(qs, queuestats.Queue{Name: name, DLQ: dlq})
		}
		if len(qs) == 0 {
			return o.finish(usageError{fmt.Sprintf("%s: name its queues (%s#orders,payments, or -queue orders)", transport.Redact(u), transport.Redact(u))})
		}
		b, err := o.open(ctx, u)
		if err != nil {
			return o.finish(err)
		}
		defer b.close()
		brokers = append(brokers, b)
		for _, q := range qs {
			if q.DLQ == "" {
				q.DLQ = dlq.QueueFor(q.Name, b.tr.Capabilities())
			}
			targets = append(targets, statsTarget{b: b, q: q})
			byBroker[b] = append(byBroker[b], q)
		}
	}
	if *listen != "" {
		serving, err := serveStats(ctx, o, *listen, *every, brokers, byBroker)
		if err != nil {
			return o.finish(err)
		}
		if !*watch {
			<-serving
			return nil
		}
	}
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for round := 1; ; round++ {
		var failed error
		views := make([]statsQueueView, 0, len(targets))
		for _, t := range targets {
			s, err := queuestats.Take(ctx, t.b.tr, t.q)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				err = t.b.wrap(err)
				if !*watch {
					return o.finish(err)
				}
				failed = errors.Join(failed, err) // a watch goes on: the broker may come back
				continue
			}
			views = append(views, viewSnapshot(t.b.name(), s))
		}
		if err := printStats(o, views, *watch); err != nil {
			return err
		}
		if failed != nil {
			if o.json {
				_ = newOut("stats", stderr, stderr).emit(map[string]any{"command": "stats", "error": failed.Error(), "at": time.Now().UTC()})
			} else {
				fmt.Fprintf(stderr, "babelqueue stats: %v\n", failed)
			}
		}
		if !*watch || (*rounds > 0 && round >= *rounds) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// printStats writes one round: JSON lines, or a table (under a time stamp when
// watching).
func printStats(o *out, views []statsQueueView, watch bool) error {
	if o.json {
		for _, v := range views {
			if err := o.emit(v); err != nil {
				return err
			}
		}
		return nil
	}
	if watch {
		fmt.Fprintf(o.stdout, "%s\n", time.Now().Format("15:04:05"))
	}
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tREADY\tIN FLIGHT\tDELAYED\tDEAD-LETTERED\tOLDEST\tDLQ\tBROKER")
	for _, v := range views {
		name := v.Queue
		if !v.Exists {
			name += " (none)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, textCount(v.Ready), textCount(v.InFlight), textCount(v.Delayed),
			textCount(v.DeadLettered), textAge(v.OldestAgeS), v.DLQ, v.Broker)
		for _, p := range v.Partitions {
			fmt.Fprintf(tw, "  partition %d\t%d\t\t\t\t%s\t\t\n", p.Partition, p.Lag, textAge(p.LagAgeS))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(table.String()) {
		if _, err := fmt.Fprintln(o.stdout, strings.TrimRight(line, " \n")); err != nil {
			return err
		}
	}
	return nil
}

func textCount(n *int64) string {
	if n == nil {
		return "—"
	}
	return fmt.Sprint(*n)
}

func textAge(s *float64) string {
	if s == nil {
		return "—"
	}
	d := time.Duration(*s * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// serveStats serves the queues' gauges on addr until ctx ends; the returned channel is
// closed when the server has stopped.
func serveStats(ctx context.Context, o *out, addr string, every time.Duration, brokers []*broker, queues map[*broker][]queuestats.Queue) (<-chan struct{}, error) {
	prom, err := metrics.NewPrometheus()
	if err != nil {
		return nil, err
	}
	var h slog.Handler = slog.NewTextHandler(o.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	if o.json {
		h = slog.NewJSONHandler(o.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	}
	var collectors []*metrics.QueueCollector
	for _, b := range brokers {
		qc, err := metrics.NewQueueCollector(b.tr, queues[b], metrics.WithMeterProvider(prom.MeterProvider()),
			metrics.WithInterval(every), metrics.WithLogger(slog.New(h)), metrics.WithAttributes(attribute.String("broker", b.name())))
		if err != nil {
			return nil, err
		}
		collectors = append(collectors, qc)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageError{fmt.Sprintf("-listen %s: %v", addr, err)}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", prom.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	for _, qc := range collectors {
		go func() { _ = qc.Run(ctx) }()
	}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = prom.Shutdown(sctx)
		close(done)
	}()
	if !o.json {
		fmt.Fprintf(o.stderr, "babelqueue stats: gauges on http://%s/metrics, counted every %v (Ctrl-C to stop)\n", l.Addr(), every)
	}
	return done, nil
}
