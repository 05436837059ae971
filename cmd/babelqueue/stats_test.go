package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/babelqueue-go/babelqueue/console"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// counts is what one of the three views (the CLI, the console, the metrics) says of a
// queue; nil is a count the view says the broker cannot tell.
type counts struct {
	Ready, InFlight, Delayed, DeadLettered *int64
	OldestAge                              *float64 // seconds
}

func (c counts) String() string {
	f := func(n *int64) string {
		if n == nil {
			return "—"
		}
		return strconv.FormatInt(*n, 10)
	}
	age := "—"
	if c.OldestAge != nil {
		age = fmt.Sprintf("%.1fs", *c.OldestAge)
	}
	return fmt.Sprintf("ready %s, in flight %s, delayed %s, dead-lettered %s, oldest %s", f(c.Ready), f(c.InFlight), f(c.Delayed), f(c.DeadLettered), age)
}

// agree reports whether two views say the same: the same counts, the same counts
// unknown, and ages within slack of each other (they are read a moment apart).
func (c counts) agree(o counts, slack float64) bool {
	eq := func(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	if !eq(c.Ready, o.Ready) || !eq(c.InFlight, o.InFlight) || !eq(c.Delayed, o.Delayed) || !eq(c.DeadLettered, o.DeadLettered) {
		return false
	}
	if (c.OldestAge == nil) != (o.OldestAge == nil) {
		return false
	}
	return c.OldestAge == nil || math.Abs(*c.OldestAge-*o.OldestAge) <= slack
}

func knownCount(n int64) *int64 {
	if n == transport.UnknownCount {
		return nil
	}
	return &n
}

// tool finds a binary installed by scripts/prometheus.sh ($env, else on PATH); missing,
// the test fails under CI=true and is skipped elsewhere.
func tool(t *testing.T, env, name string) string {
	t.Helper()
	for _, p := range []string{os.Getenv(env), name, "/usr/bin/" + name} {
		if p == "" {
			continue
		}
		if found, err := exec.LookPath(p); err == nil {
			return found
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not installed: run scripts/prometheus.sh (CI=true: this test never skips)", name)
	}
	t.Skipf("%s not installed: run scripts/prometheus.sh (or set %s)", name, env)
	return ""
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startPrometheus runs a private Prometheus that scrapes target every second and
// returns its base URL.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"+
		"  - job_name: babelqueue-stats\n    static_configs:\n      - targets: ['%s']\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	base := "http://" + addr
	for deadline := time.Now().Add(60 * time.Second); ; {
		if resp, err := http.Get(base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus did not get ready:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// promValue evaluates expr in Prometheus; ok is false when it has no series.
func promValue(t *testing.T, base, expr string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Status != "success" {
		t.Fatalf("%s: %v %s", expr, err, out.Error)
	}
	if len(out.Data.Result) != 1 {
		return 0, false
	}
	s, _ := out.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// scrapeMetrics reads the exporter's /metrics.
func scrapeMetrics(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return fams
}

// gauge is the value of the family's series for queue; nil when there is none.
func gauge(fams map[string]*dto.MetricFamily, name, queue string) *float64 {
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "queue" && l.GetValue() == queue {
				v := m.GetGauge().GetValue()
				return &v
			}
		}
	}
	return nil
}

func metricCounts(fams map[string]*dto.MetricFamily, queue string) counts {
	n := func(name string) *int64 {
		if v := gauge(fams, name, queue); v != nil {
			i := int64(*v)
			return &i
		}
		return nil
	}
	return counts{Ready: n("babelqueue_queue_messages_ready"), InFlight: n("babelqueue_queue_messages_in_flight"),
		Delayed: n("babelqueue_queue_messages_delayed"), DeadLettered: n("babelqueue_queue_messages_dead_lettered"),
		OldestAge: gauge(fams, "babelqueue_queue_oldest_message_age_seconds", queue)}
}

func cliCounts(t *testing.T, raw, queue string) counts {
	t.Helper()
	var v statsQueueView
	cliJSON(t, &v, "stats", "--json", raw+"#"+queue)
	return counts{Ready: v.Ready, InFlight: v.InFlight, Delayed: v.Delayed, DeadLettered: v.DeadLettered, OldestAge: v.OldestAgeS}
}

// consoleCounts reads the console's overview of the queue of broker b.
func consoleCounts(t *testing.T, base string, b int) (counts, bool) {
	t.Helper()
	resp, err := http.Get(base + "/api/overview")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var o struct {
		Brokers []struct {
			Queues []struct {
				Stats     *transport.QueueStats `json:"stats"`
				DLQStats  *transport.QueueStats `json:"dlq_stats"`
				OldestAge *float64              `json:"oldest_age_s"`
			} `json:"queues"`
		} `json:"brokers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		t.Fatalf("console overview: %v", err)
	}
	q := o.Brokers[b].Queues[0]
	if q.Stats == nil || q.DLQStats == nil {
		return counts{}, false
	}
	return counts{Ready: knownCount(q.Stats.Ready), InFlight: knownCount(q.Stats.InFlight), Delayed: knownCount(q.Stats.Delayed),
		DeadLettered: knownCount(q.DLQStats.Ready), OldestAge: q.OldestAge}, true
}

// signalTarget is one broker of TestStatsOnEveryBroker and its queues.
type signalTarget struct {
	b          opsBroker
	raw        string
	queue, dlq string
	tr         transport.Transport
}

// TestStatsOnEveryBroker: on every real broker, a queue whose backlog grows and whose
// dead-letter queue fills, round after round, moves the gauges that `babelqueue stats
// -listen` serves on /metrics (one exporter for every broker, as a sidecar runs it)
// and that a private Prometheus scrapes from it; once the writes stop, the CLI's
// `stats --json`, the console's overview and the metrics say the same counts.
func TestStatsOnEveryBroker(t *testing.T) {
	binary(t)
	awsTestCredentials(t)
	promBin := tool(t, "BQ_PROMETHEUS", "prometheus")
	var targets []*signalTarget
	var urls []string
	for _, b := range opsBrokers() {
		st := &signalTarget{b: b, raw: b.url(t), queue: transporttest.UniqueName("bqsig")}
		st.dlq = b.dlq(st.queue)
		if b.prepare != nil {
			b.prepare(t, st.raw, st.queue, st.dlq)
		}
		st.tr = openT(t, st.raw)
		targets = append(targets, st)
		urls = append(urls, st.raw+"#"+st.queue)
	}

	// The exporter, as a sidecar runs it, and a Prometheus that scrapes it.
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	exporter := exec.CommandContext(ctx, binary(t), append([]string{"stats", "-listen", addr, "-interval", "1s"}, urls...)...)
	var exporterLog bytes.Buffer
	exporter.Stdout, exporter.Stderr = &exporterLog, &exporterLog
	if err := exporter.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = exporter.Wait()
		if t.Failed() {
			t.Logf("exporter:\n%s", exporterLog.String())
		}
	})
	prom := startPrometheus(t, promBin, addr)

	// The console, as `babelqueue console` serves it, over transports of its own.
	var brokers []console.Broker
	for _, st := range targets {
		brokers = append(brokers, console.Broker{URL: st.raw, Transport: openT(t, st.raw), Queues: []console.Queue{{Name: st.queue}}})
	}
	c, err := console.New(brokers, console.WithSampleInterval(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(func() {
		srv.Close()
		_ = c.Close()
	})

	for i, st := range targets {
		t.Run(st.b.name, func(t *testing.T) {
			t.Parallel()
			testSignals(t, st, i, addr, prom, srv.URL)
		})
	}
}

// An envelope made ten minutes ago.
func oldEnvelope(t testing.TB, queue string, n int) *transport.Message {
	t.Helper()
	created := time.Now().Add(-10 * time.Minute)
	e, err := envelope.Make("urn:babel:orders:created", map[string]int{"n": n}, envelope.WithQueue(queue), envelope.WithCreatedAt(created))
	if err != nil {
		t.Fatal(err)
	}
	body, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &transport.Message{Queue: queue, Body: body, Projection: transport.Projection{URN: e.Job, TraceID: e.TraceID,
		MessageID: e.Meta.ID, Lang: e.Meta.Lang, SchemaVersion: e.Meta.SchemaVersion, CreatedAt: e.Meta.CreatedAt}}
}

func testSignals(t *testing.T, st *signalTarget, index int, exporter, prom, consoleURL string) {
	const rounds, perRound, deadPerRound = 3, 4, 2
	sent := 0
	var lastReady, lastDead float64 = -1, -1
	for round := 1; round <= rounds; round++ {
		var work, dead []*transport.Message
		for i := range perRound {
			work = append(work, oldEnvelope(t, st.queue, sent+i))
		}
		for i := range deadPerRound {
			dead = append(dead, oldEnvelope(t, st.dlq, 1000+round*10+i))
		}
		sent += perRound
		seed(t, st.tr, work)
		seed(t, st.tr, dead)
		wantReady, wantDead := float64(round*perRound), float64(round*deadPerRound)

		// /metrics follows, then Prometheus.
		deadline := time.Now().Add(45 * time.Second)
		for {
			fams := scrapeMetrics(t, exporter)
			r := gauge(fams, "babelqueue_queue_messages_ready", st.queue)
			d := gauge(fams, "babelqueue_queue_messages_dead_lettered", st.queue)
			if r != nil && d != nil && *r == wantReady && *d == wantDead {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: /metrics ready %v, dead-lettered %v; want %v and %v", round, deref(r), deref(d), wantReady, wantDead)
			}
			time.Sleep(200 * time.Millisecond)
		}
		for {
			r, okR := promValue(t, prom, `babelqueue_queue_messages_ready{queue="`+st.queue+`"}`)
			d, okD := promValue(t, prom, `babelqueue_queue_messages_dead_lettered{queue="`+st.queue+`"}`)
			if okR && okD && r == wantReady && d == wantDead {
				if r <= lastReady || d <= lastDead {
					t.Errorf("round %d: Prometheus reads %v and %v after %v and %v", round, r, d, lastReady, lastDead)
				}
				lastReady, lastDead = r, d
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: Prometheus reads ready %v (%v), dead-lettered %v (%v); want %v and %v", round, r, okR, d, okD, wantReady, wantDead)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	// The partition gauges of a log.
	if st.b.name == "kafka" {
		if v, ok := promValue(t, prom, `sum(babelqueue_queue_partition_lag{queue="`+st.queue+`"})`); !ok || v != lastReady {
			t.Errorf("Kafka: the partitions' lag adds up to %v (%v), ready is %v", v, ok, lastReady)
		}
		if v, ok := promValue(t, prom, `max(babelqueue_queue_partition_lag_seconds{queue="`+st.queue+`"})`); !ok || v < 590 {
			t.Errorf("Kafka: partition lag age %v (%v), want the first record's ten minutes", v, ok)
		}
	}

	// The three views agree once the writes have stopped.
	var cli, con, met counts
	deadline := time.Now().Add(45 * time.Second)
	for {
		cli = cliCounts(t, st.raw, st.queue)
		var ok bool
		con, ok = consoleCounts(t, consoleURL, index)
		met = metricCounts(scrapeMetrics(t, exporter), st.queue)
		if ok && cli.agree(con, 5) && cli.agree(met, 5) && cli.Ready != nil && float64(*cli.Ready) == lastReady {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the views disagree:\n  CLI     %v\n  console %v\n  metrics %v", cli, con, met)
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("CLI, console and metrics: %v", cli)
}

func deref(p *float64) any {
	if p == nil {
		return "none"
	}
	return *p
}

// stats refuses a command line it cannot count from, and prints a queue nobody wrote to
// as empty and not created, as text and as JSON, names a dead-letter queue given after
// "=", and stops a watch after -n rounds.
func TestStatsCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"stats"}, 2, "want at least one broker URL"},
		{[]string{"stats", "memory://"}, 2, "name its queues"},
		{[]string{"stats", "-interval", "0", "memory://#q"}, 2, "-interval must be positive"},
		{[]string{"stats", "--json", "redis://:hunter2@127.0.0.1:1/0#q"}, 1, `"command":"stats"`},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		all := out.String() + errb.String()
		if code != tc.code || !strings.Contains(all, tc.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d containing %q", tc.args, code, all, tc.code, tc.want)
		}
		if strings.Contains(all, "hunter2") {
			t.Errorf("%v: output shows the password: %s", tc.args, all)
		}
	}

	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"stats", "memory://#orders=orders-failed"}, &out, &errb); code != 0 {
		t.Fatalf("stats: exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "QUEUE") || !strings.Contains(lines[1], "orders (none)") ||
		!strings.Contains(lines[1], "orders-failed") || !strings.Contains(lines[1], "memory:") {
		t.Errorf("stats printed:\n%s", out.String())
	}

	out.Reset()
	if code := run(context.Background(), []string{"stats", "-watch", "-n", "2", "-interval", "10ms", "--json", "-queue", "a", "-queue", "b", "memory://"}, &out, &errb); code != 0 {
		t.Fatalf("stats -watch: exit %d: %s", code, errb.String())
	}
	var seen []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var v statsQueueView
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if v.Exists || v.Ready == nil || *v.Ready != 0 || v.OldestAgeS == nil || *v.OldestAgeS != 0 || v.Appended != nil || v.DLQ != v.Queue+".dlq" {
			t.Errorf("an empty memory queue: %s", line)
		}
		seen = append(seen, v.Queue)
	}
	if strings.Join(seen, ",") != "a,b,a,b" {
		t.Errorf("two rounds of a and b, got %v", seen)
	}
}
