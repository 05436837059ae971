package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/otel/metrics"
	"github.com/babelqueue-go/babelqueue/queuestats"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// tool finds a binary installed by scripts/prometheus.sh: $env, else name on PATH, else
// /usr/bin/name. Missing, the test fails under CI=true and is skipped elsewhere.
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
	msg := fmt.Sprintf("%s not installed: run scripts/prometheus.sh (or set %s)", name, env)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: this test never skips)")
	}
	t.Skip(msg)
	return ""
}

// freePort returns a loopback port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startPrometheus runs a private Prometheus that scrapes target every second, and
// returns its base URL.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"+
		"  - job_name: babelqueue\n    static_configs:\n      - targets: ['%s']\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
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
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus did not get ready: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// promQuery evaluates expr now and returns the number of series in the result.
func promQuery(t *testing.T, base, expr string) (int, error) {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, err
	}
	if out.Status != "success" {
		return 0, errors.New(out.Error)
	}
	return len(out.Data.Result), nil
}

// promValue evaluates expr now and returns the value of its one series; ok is false
// when it has none.
func promValue(t *testing.T, base, expr string) (v float64, ok bool) {
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
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Status != "success" {
		t.Fatalf("%s: %s", expr, out.Error)
	}
	if len(out.Data.Result) == 0 {
		return 0, false
	}
	if len(out.Data.Result) > 1 {
		t.Fatalf("%s: %d series, want one", expr, len(out.Data.Result))
	}
	str, _ := out.Data.Result[0].Value[1].(string)
	v, err = strconv.ParseFloat(str, 64)
	if err != nil {
		t.Fatalf("%s: value %q", expr, str)
	}
	return v, true
}

func promValue2(t *testing.T, base, expr string) float64 {
	t.Helper()
	v, _ := promValue(t, base, expr)
	return v
}

// scalingQueries reads the KEDA ScaledObject's query and the prometheus-adapter rule
// the HPA of docs/operations.md uses (its <<.LabelMatchers>> filled from the HPA's
// selector, as the adapter does), and checks they are one query.
func scalingQueries(t *testing.T) (keda, hpa string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(pyinterop.RepoRoot(t), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, "### Scaling on the backlog")
	if i < 0 {
		t.Fatal("docs/operations.md has no section \"Scaling on the backlog\"")
	}
	doc = doc[i:]
	field := func(name string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)^\s*` + name + `:\s*(.+?)\s*(#.*)?$`).FindStringSubmatch(doc)
		if m == nil {
			t.Fatalf("docs/operations.md: no %s in the scaling examples", name)
		}
		return m[1]
	}
	keda = field("query")
	selector := regexp.MustCompile(`(?s)matchLabels:\s*\n\s*queue:\s*(\S+)`).FindStringSubmatch(doc)
	if selector == nil {
		t.Fatal("docs/operations.md: the HPA has no queue selector")
	}
	hpa = strings.ReplaceAll(field("metricsQuery"), "<<.LabelMatchers>>", `queue="`+selector[1]+`"`)
	if keda != hpa {
		t.Errorf("the KEDA query %q and the HPA's %q differ", keda, hpa)
	}
	return keda, hpa
}

// panelQuery is one target of the dashboard.
type panelQuery struct{ panel, expr string }

// dashboardQueries reads docs/grafana-dashboard.json and returns every target's
// expression with the dashboard's variables filled in as Grafana would (all queues).
func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(pyinterop.RepoRoot(t), "docs", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	var qs []panelQuery
	fill := strings.NewReplacer("$queue", ".*", "$__rate_interval", "15s")
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, panelQuery{p.Title, fill.Replace(tg.Expr)})
		}
	}
	return qs
}

// fleet is a run that makes every series of the dashboard: an app on Redis (handled,
// retried, dead-lettered, poison, unknown URNs, published), a second on Redis with
// dead-lettering off (drops), and one on memory:// with a schema-version gate whose
// settle writes and receives sometimes fail (gate rejections, settle failures, rewinds,
// receive errors: faults a shared broker cannot be made to show).
//
// Two QueueCollectors count the queues through the brokers every second: the Redis
// app's queue and dead-letter queue, a Redis queue nobody consumes whose backlog grows
// every round (what the scaling queries of docs/operations.md read), and the memory
// app's queue, which cannot be counted while its broker is away.
type fleet struct {
	redis, drops, faults *babelqueue.App
	faulty               *flaky
	backlog              string // a Redis queue with no consumer
	collectors           []*metrics.QueueCollector
	sent                 atomic.Int64
}

const (
	orderFlaky   = "urn:babel:orders:flaky"
	orderUnknown = "urn:babel:orders:unheard-of"
)

func startFleet(t *testing.T, obs *metrics.Observer, mp metric.MeterProvider) *fleet {
	t.Helper()
	redisURL := transporttest.BrokerURL(t, "BQ_REDIS_URL", "redis")
	stamp := time.Now().UnixNano()
	ctx := context.Background()
	f := &fleet{backlog: fmt.Sprintf("otel-dash-backlog-%d", stamp)}
	var err error
	common := []babelqueue.Option{babelqueue.WithObserver(obs), babelqueue.WithLogger(quiet()), babelqueue.WithConcurrency(2),
		babelqueue.WithRetryTiers(50 * time.Millisecond)}
	f.redis, err = babelqueue.Open(ctx, redisURL, append(common, babelqueue.WithQueue(fmt.Sprintf("otel-dash-%d", stamp)),
		babelqueue.WithDeadLetter(true))...)
	if err != nil {
		t.Fatal(err)
	}
	f.drops, err = babelqueue.Open(ctx, redisURL, append(common, babelqueue.WithQueue(fmt.Sprintf("otel-dash-drops-%d", stamp)))...)
	if err != nil {
		t.Fatal(err)
	}
	f.faulty = &flaky{Transport: memory.New(memory.WithCapabilities(transport.Capabilities{Delay: true, PublishConfirmed: true,
		SchemaGate: true, Attempts: transport.AttemptsHeaderAuthoritative})), down: make(chan struct{})}
	var writes atomic.Int64
	f.faulty.FailWrites(func(m *transport.Message) error {
		if m.Attempts > 0 && writes.Add(1)%2 == 0 {
			return errors.New("broker did not confirm")
		}
		return nil
	})
	f.faults, err = babelqueue.New(f.faulty, append(common, babelqueue.WithQueue("faults"))...)
	if err != nil {
		t.Fatal(err)
	}
	var attempts sync.Map
	for _, app := range []*babelqueue.App{f.redis, f.drops, f.faults} {
		app.Handle(orderCreated, func(_ context.Context, m *babelqueue.Message) error {
			time.Sleep(time.Duration(len(m.ID())%5) * time.Millisecond)
			return nil
		})
		app.Handle(orderRefused, func(context.Context, *babelqueue.Message) error {
			return babelqueue.NoRetry(errors.New("order refused"))
		})
		app.Handle(orderFlaky, func(_ context.Context, m *babelqueue.Message) error {
			if _, seen := attempts.LoadOrStore(m.ID(), true); !seen {
				return errors.New("payment gateway timeout")
			}
			return nil
		})
	}
	redisQueues := append(metrics.QueuesOf(f.redis), queuestats.Queue{Name: f.backlog})
	for _, c := range []struct {
		tr     transport.Transport
		queues []queuestats.Queue
	}{{f.redis.Transport(), redisQueues}, {f.faulty, metrics.QueuesOf(f.faults)}} {
		qc, err := metrics.NewQueueCollector(c.tr, c.queues, metrics.WithMeterProvider(mp),
			metrics.WithInterval(time.Second), metrics.WithLogger(quiet()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = qc.Close() })
		f.collectors = append(f.collectors, qc)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, qc := range f.collectors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = qc.Run(runCtx)
		}()
	}
	t.Cleanup(func() { // the shared Redis keeps no backlog of this run
		opt, err := goredis.ParseURL(redisURL)
		if err != nil {
			return
		}
		cl := goredis.NewClient(opt)
		defer cl.Close()
		cl.Del(context.Background(), f.backlog, f.redis.Queue(), f.redis.DeadLetterQueue(), f.drops.Queue())
	})
	for _, app := range []*babelqueue.App{f.redis, f.drops, f.faults} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := app.Run(runCtx); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
	}
	t.Cleanup(func() {
		stop()
		wg.Wait()
		for _, app := range []*babelqueue.App{f.redis, f.drops, f.faults} {
			_ = app.Close(context.Background())
		}
	})
	return f
}

// load publishes one round of every kind of traffic.
func (f *fleet) load(ctx context.Context, round int) error {
	for _, urn := range []string{orderCreated, orderCreated, orderCreated, orderFlaky, orderRefused, orderUnknown} {
		if _, err := f.redis.Publish(ctx, urn, map[string]int{"round": round}); err != nil {
			return err
		}
	}
	if err := f.redis.Transport().Publish(ctx, &transport.Message{Queue: f.redis.Queue(), Body: []byte("not an envelope")}); err != nil {
		return err
	}
	if _, err := f.drops.Publish(ctx, orderRefused, map[string]int{"round": round}); err != nil {
		return err
	}
	if _, err := f.faults.Publish(ctx, orderFlaky, map[string]int{"round": round}); err != nil {
		return err
	}
	f.faulty.Inject("faults", memory.Stored{Body: []byte(`{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"id":"x","queue":"faults","lang":"php","schema_version":2,"created_at":1}}`),
		SchemaVersion: "2"})
	if _, err := f.redis.Publish(ctx, orderCreated, map[string]int{"round": round}, babelqueue.ToQueue(f.backlog)); err != nil {
		return err
	}
	if round%20 == 10 {
		f.faulty.fail(true)
		f.collectors[1].Collect(ctx) // a round of counting while the broker is away
		time.Sleep(30 * time.Millisecond)
		f.faulty.fail(false)
	}
	f.sent.Add(1)
	return nil
}

// A private Prometheus scrapes a real run; every query of every panel of
// docs/grafana-dashboard.json returns data; a screenshot of Prometheus's graph page of
// the main rates is taken in headless Chromium (written to docs/ with
// BQ_UPDATE_SCREENSHOT=1).
func TestDashboardQueriesReturnData(t *testing.T) {
	promBin := tool(t, "BQ_PROMETHEUS", "prometheus")
	chromium := tool(t, "BQ_CHROMIUM", "chromium")
	queries := dashboardQueries(t)

	prom, obs := newObserver(t)
	srv := httptest.NewServer(prom.Handler())
	defer srv.Close()
	base := startPrometheus(t, promBin, strings.TrimPrefix(srv.URL, "http://"))
	f := startFleet(t, obs, prom.MeterProvider())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := time.Now()
	loadDone := make(chan error, 1)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for round := 0; ; round++ {
			if err := f.load(ctx, round); err != nil && ctx.Err() == nil {
				loadDone <- err
				return
			}
			select {
			case <-ctx.Done():
				loadDone <- nil
				return
			case <-tick.C:
			}
		}
	}()

	// Every query returns data once Prometheus holds a few scrapes of the run.
	pending := queries
	deadline := time.Now().Add(60 * time.Second)
	for len(pending) > 0 {
		var still []panelQuery
		for _, q := range pending {
			n, err := promQuery(t, base, q.expr)
			if err != nil {
				t.Fatalf("panel %q: %s: %v", q.panel, q.expr, err)
			}
			if n == 0 {
				still = append(still, q)
			}
		}
		pending = still
		if len(pending) > 0 && time.Now().After(deadline) {
			for _, q := range pending {
				t.Errorf("panel %q: %s returned no data", q.panel, q.expr)
			}
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("%d queries of the dashboard returned data after %d rounds of traffic", len(queries)-len(pending), f.sent.Load())

	// The gauges move in Prometheus as the backlog grows and the dead-letter queue
	// fills, and the scaling queries of docs/operations.md read the backlog.
	keda, hpa := scalingQueries(t)
	on := func(q string) string { return strings.ReplaceAll(q, `queue="orders"`, `queue="`+f.backlog+`"`) }
	ready := `babelqueue_queue_messages_ready{queue="` + f.backlog + `"}`
	dead := `babelqueue_queue_messages_dead_lettered{queue="` + f.redis.Queue() + `"}`
	first := map[string]float64{}
	for _, q := range []string{ready, dead, on(keda), on(hpa)} {
		v, ok := promValue(t, base, q)
		if !ok || v <= 0 {
			t.Fatalf("%s: %v (data: %v), want a backlog", q, v, ok)
		}
		first[q] = v
	}
	deadline = time.Now().Add(30 * time.Second)
	for q, was := range first {
		for {
			v, _ := promValue(t, base, q)
			if v > was {
				t.Logf("%s: %v, then %v", q, was, v)
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s stays at %v while the run goes on", q, v)
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	if k, h := promValue2(t, base, on(keda)), promValue2(t, base, on(hpa)); k != h {
		t.Errorf("the KEDA query reads %v, the HPA's %v", k, h)
	}

	// The graph shows the last 20 seconds: let the traffic fill them.
	time.Sleep(time.Until(started.Add(20 * time.Second)))
	screenshot(t, chromium, base, []string{
		`sum by (outcome) (rate(babelqueue_handler_duration_seconds_count[15s]))`,
		`sum by (outcome) (rate(babelqueue_deliveries_settled_total[15s]))`,
		`sum by (reason) (rate(babelqueue_deliveries_dead_lettered_total[15s]))`,
	})
	cancel()
	if err := <-loadDone; err != nil {
		t.Fatal(err)
	}
}

// screenshot takes Prometheus's graph page of exprs (the last 20 seconds) in headless
// Chromium. Debian's Prometheus serves the classic UI (/graph redirects there).
func screenshot(t *testing.T, chromium, base string, exprs []string) {
	t.Helper()
	q := url.Values{}
	for i, e := range exprs {
		g := fmt.Sprintf("g%d.", i)
		q.Set(g+"expr", e)
		q.Set(g+"tab", "0")
		q.Set(g+"range_input", "20s")
		q.Set(g+"stacked", "0")
	}
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1400, 1800))...)
	defer cancel()
	cctx, cancel := chromedp.NewContext(alloc)
	defer cancel()
	cctx, cancel = context.WithTimeout(cctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(cctx,
		chromedp.Navigate(base+"/graph?"+q.Encode()),
		chromedp.WaitVisible(`.graph svg, .graph-chart canvas`), // the classic UI (Debian's) or the React one
		chromedp.Sleep(2*time.Second),
	); err != nil {
		t.Fatalf("graph page: %v", err)
	}
	png, err := chromedp.Run(cctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) || len(png) < 20_000 {
		t.Fatalf("screenshot is not a PNG of a page (%d bytes)", len(png))
	}
	out := filepath.Join(t.TempDir(), "prometheus-graph.png")
	if os.Getenv("BQ_UPDATE_SCREENSHOT") == "1" {
		out = filepath.Join(pyinterop.RepoRoot(t), "docs", "prometheus-graph.png")
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(png))
}
