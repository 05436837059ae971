// Command soak is the soak benchmark of issue 39: the runtime, in a worker process of
// its own, consumes a steady stream at half the peak the run measured first, on Redis,
// RabbitMQ and Kafka side by side, with a failure mix (one message in ten always fails:
// three attempts, then the dead-letter queue; one in ten fails once and is handled on
// its retry). Every tick the run reads the worker's resident memory and open
// descriptors (/proc/<pid>) and its Go heap and goroutines (runtime/metrics, asked over
// its standard input); every window it makes a sample of their medians and of the p50
// and p99 of the end-to-end latency (a message's publish to its handler's start, first
// deliveries). A run passes when every measure is flat after the warm-up (the growth of
// a Theil–Sen line through the judged samples, from the first to the last, at most
// 10 %; the short form reports the p99 latency without judging it) and every meta.id
// was handled or dead-lettered (duplicates are counted, not failed). The engine is internal/faultsuite's (Soak), the fault suite's worker and
// books.
//
//	go run ./faults/cmd/soak                 the short form: 2 minutes (make test)
//	go run ./faults/cmd/soak -form long      30 minutes at half the peak (make soak)
//	go run ./faults/cmd/soak -brokers kafka -rate 2000 -out soak.json
//
// It needs the brokers' URLs in the environment (eval "$(bash scripts/brokers.sh env)")
// and Linux (/proc). It prints each sample as it is made on standard error, then the
// tables in Markdown, and exits 1 when a run fails.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
	"github.com/babelqueue-go/babelqueue/transport"

	_ "github.com/babelqueue-go/babelqueue/transport/amqp"
	_ "github.com/babelqueue-go/babelqueue/transport/kafka"
	_ "github.com/babelqueue-go/babelqueue/transport/redis"
)

func main() {
	if faultsuite.IsWorker() {
		os.Exit(faultsuite.WorkerMain(openWorker))
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// openWorker opens a worker's transport from its URL.
func openWorker(ctx context.Context, spec faultsuite.WorkerSpec) (transport.Transport, faultsuite.Switch, error) {
	tr, err := transport.Open(ctx, spec.URL)
	return tr, nil, err
}

// broker is one broker of the soak: the variable of its URL and its binding.
type broker struct {
	name, env string
	bind      func(raw string) (*faultsuite.Binding, func(queue, dlq string), error)
}

var brokers = []broker{
	{name: "redis", env: "BQ_REDIS_URL", bind: func(raw string) (*faultsuite.Binding, func(string, string), error) {
		return &faultsuite.Binding{Name: "Redis", URL: func(faultsuite.Role, string) string { return raw },
			Settings: "the default layout and acks; retry_after 60 s (the default)"}, nil, nil
	}},
	{name: "amqp", env: "BQ_AMQP_URL", bind: func(raw string) (*faultsuite.Binding, func(string, string), error) {
		return &faultsuite.Binding{Name: "RabbitMQ", URL: func(faultsuite.Role, string) string { return raw },
			Settings: "publisher confirms on (the default); settle writes pipelined (the default)"}, nil, nil
	}},
	{name: "kafka", env: "BQ_KAFKA_URL", bind: kafkaBinding},
}

// kafkaBinding reaches Kafka: a consumer group per run and role, the publisher's
// publishes confirmed (confirm=1), the topics made before the run (8 partitions, one
// for the dead letters) and deleted after it.
func kafkaBinding(raw string) (*faultsuite.Binding, func(queue, dlq string), error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, err
	}
	seeds := strings.Split(u.Host, ",")
	with := func(kv ...string) string {
		v := *u
		q := v.Query()
		for i := 0; i+1 < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		v.RawQuery = q.Encode()
		return v.String()
	}
	admin := func(ctx context.Context, f func(*kadm.Client) error) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			return err
		}
		defer cl.Close()
		return f(kadm.NewClient(cl))
	}
	b := &faultsuite.Binding{
		Name: "Kafka",
		URL: func(role faultsuite.Role, queue string) string {
			switch role {
			case faultsuite.RolePublisher:
				return with("confirm", "1")
			case faultsuite.RoleReader:
				return with("group", queue+"-reader")
			}
			return with("group", queue)
		},
		Prepare: func(ctx context.Context, queue, dlq string) error {
			return admin(ctx, func(adm *kadm.Client) error {
				for topic, parts := range map[string]int32{queue: 8, dlq: 1} {
					resp, err := adm.CreateTopic(ctx, parts, 1, nil, topic)
					if err == nil {
						err = resp.Err
					}
					if err != nil {
						return fmt.Errorf("create topic %s: %w", topic, err)
					}
				}
				return waitLeaders(ctx, adm, queue, dlq)
			})
		},
		Settings: "8 partitions; the publisher uses confirm=1; session_timeout 10 s and pipeline_settles on (the defaults)",
	}
	cleanup := func(queue, dlq string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = admin(ctx, func(adm *kadm.Client) error {
			_, err := adm.DeleteTopics(ctx, queue, dlq)
			return err
		})
	}
	return b, cleanup, nil
}

// waitLeaders waits until every partition of topics has a leader: a producer that
// writes sooner waits for its own metadata refresh.
func waitLeaders(ctx context.Context, adm *kadm.Client, topics ...string) error {
	for {
		md, err := adm.Metadata(ctx, topics...)
		ok := err == nil
		for _, topic := range topics {
			td, found := md.Topics[topic]
			ok = ok && found && td.Err == nil && len(td.Partitions) > 0
			for _, p := range td.Partitions {
				ok = ok && p.Err == nil && p.Leader >= 0
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v have no leaders: %w", topics, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	form := fs.String("form", "short", "short (2 minutes, make test) or long (30 minutes, make soak)")
	only := fs.String("brokers", "redis,amqp,kafka", "the brokers, side by side")
	serial := fs.Bool("serial", false, "run the brokers one after the other")
	rate := fs.Float64("rate", 0, "the steady rate in messages/s (default: half the peak measured first)")
	duration := fs.Duration("duration", 0, "the steady stream's length (default: the form's)")
	out := fs.String("out", "", "write the results as JSON to this file")
	logs := fs.String("logs", "", "keep the worker and run logs in this directory (default: a temporary one, removed when every run passes)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var plan faultsuite.SoakPlan
	switch *form {
	case "short":
		plan = faultsuite.ShortSoak()
	case "long":
		plan = faultsuite.LongSoak()
	default:
		return fmt.Errorf("-form %q: want short or long", *form)
	}
	plan.Rate = *rate
	if *duration > 0 {
		plan.Duration = *duration
	}
	dir := *logs
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "babelqueue-soak-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}

	var chosen []broker
	for _, name := range strings.Split(*only, ",") {
		i := -1
		for k, b := range brokers {
			if b.name == strings.TrimSpace(name) {
				i = k
			}
		}
		if i < 0 {
			return fmt.Errorf("-brokers: no broker %q (redis, amqp, kafka)", name)
		}
		if os.Getenv(brokers[i].env) == "" {
			return fmt.Errorf("%s is not set (eval \"$(bash scripts/brokers.sh env)\")", brokers[i].env)
		}
		chosen = append(chosen, brokers[i])
	}

	start := time.Now()
	fmt.Fprintf(os.Stderr, "soak, %s form: %s at %s, %s steady (%s warm-up), a sample every %s; logs in %s\n",
		*form, *only, rateText(plan), plan.Duration, plan.Warmup, plan.Window, dir)
	budget := plan.Calibrate + plan.Duration + 2*plan.Drain + 3*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	env := faultsuite.Env{Spawn: spawnWorker, Dir: dir, Logf: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}}
	results := make([]*faultsuite.SoakResult, len(chosen))
	errs := make([]error, len(chosen))
	var wg sync.WaitGroup
	for i, b := range chosen {
		one := func() {
			binding, cleanup, err := b.bind(os.Getenv(b.env))
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", b.name, err)
				return
			}
			res, err := faultsuite.Soak(ctx, binding, plan, env)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", binding.Name, err)
				return
			}
			res.Form = *form
			if cleanup != nil {
				cleanup(res.Queue, res.Queue+".dlq")
			}
			results[i] = res
		}
		if *serial {
			one()
			continue
		}
		wg.Go(one)
	}
	wg.Wait()

	var done []*faultsuite.SoakResult
	var failures []string
	for i, res := range results {
		if errs[i] != nil {
			failures = append(failures, errs[i].Error())
			continue
		}
		done = append(done, res)
		for _, f := range res.Failures() {
			failures = append(failures, res.Broker+": "+f)
		}
	}
	fmt.Print(faultsuite.SoakMarkdown(done))
	if *out != "" {
		b, err := json.MarshalIndent(done, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "soak, %s form: %s in %s\n", *form, *only, time.Since(start).Round(time.Second))
	if len(failures) > 0 {
		return fmt.Errorf("%d failures (logs kept in %s):\n  %s", len(failures), dir, strings.Join(failures, "\n  "))
	}
	if *logs == "" {
		_ = os.RemoveAll(dir)
	}
	return nil
}

func rateText(p faultsuite.SoakPlan) string {
	if p.Rate > 0 {
		return fmt.Sprintf("%.0f messages/s", p.Rate)
	}
	return fmt.Sprintf("%.0f%% of the peak measured in %s", 100*p.Fraction, p.Calibrate)
}

// spawnWorker returns the command of a worker process: this program again, which dies
// with the run whatever happens to it.
func spawnWorker() *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}
