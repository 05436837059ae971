package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// The operating commands are tested as a user runs them: the binary is built once
// into a temporary directory and run with os/exec against the real brokers, and
// what it prints is what the assertions read.

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// binary builds the babelqueue command once for the test run.
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "babelqueue-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "babelqueue")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// result is one run of the binary.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs the binary with args and waits for it, within two minutes.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("babelqueue %v: %v", args, err)
	}
	return r
}

// cliJSON runs the binary and decodes its stdout into v; a non-zero exit fails.
func cliJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	r := cli(t, args...)
	if r.code != 0 {
		t.Fatalf("babelqueue %v: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("babelqueue %v: output is not JSON (%v): %s", args, err, r.stdout)
	}
}

// opsBroker is one broker the operating commands are checked on.
type opsBroker struct {
	name, env, service string
	// query is added to the broker URL (a Kafka group of the test's own, …).
	query func(t *testing.T) string
	// dlq names the dead-letter queue of a work queue.
	dlq func(q string) string
	// prepare makes the queues before the test writes to them (SQS: a short
	// visibility timeout, so what a killed consumer held comes back in seconds).
	prepare func(t *testing.T, raw, queue, dlq string)
	// settleAfterKill waits for what a killed consumer held to be back.
	settleAfterKill time.Duration
	// reserved returns the bodies a killed consumer left reserved (Redis).
	reserved func(t *testing.T, raw, dlq string) [][]byte
	// maxDuplicates is how many messages a kill may leave in both queues: 0 where
	// the move and the acknowledgement are one step.
	maxDuplicates int
	keys          bool
}

func dotDLQ(q string) string { return q + ".dlq" }

// keyOf is the key a message written with k comes back with: none on a broker
// without keys, none for an empty key on Pulsar (its client cannot tell them apart).
func (b opsBroker) keyOf(k []byte) []byte {
	if !b.keys || b.name == "pulsar" && len(k) == 0 {
		return nil
	}
	return k
}

func opsBrokers() []opsBroker {
	return []opsBroker{
		{name: "redis", env: "BQ_REDIS_URL", service: "redis", dlq: dotDLQ, reserved: redisReserved},
		// RabbitMQ moves in an AMQP transaction (publish + ack + tx.commit on the
		// delivery's channel): a kill leaves no duplicate.
		{name: "rabbitmq", env: "BQ_AMQP_URL", service: "rabbitmq", dlq: dotDLQ, settleAfterKill: time.Second},
		// Kafka moves in a Kafka transaction (produce + the DLQ record's offset committed
		// for the group in it + end): a kill leaves no duplicate.
		{name: "kafka", env: "BQ_KAFKA_URL", service: "kafka", dlq: dotDLQ, keys: true,
			query: func(*testing.T) string { return "group=" + transporttest.UniqueName("bqops") }},
		{name: "sqs", env: "BQ_SQS_URL", service: "sqs", dlq: func(q string) string { return q + "-dlq" }, keys: true,
			prepare: sqsShortVisibility, settleAfterKill: 4 * time.Second, maxDuplicates: 1},
		{name: "artemis", env: "BQ_ARTEMIS_URL", service: "artemis", dlq: dotDLQ, settleAfterKill: time.Second, maxDuplicates: 1},
		{name: "pulsar", env: "BQ_PULSAR_URL", service: "pulsar", dlq: dotDLQ, keys: true, settleAfterKill: 2 * time.Second, maxDuplicates: 1},
	}
}

// brokerURL returns the broker's URL with the test's query parameters.
func (b opsBroker) url(t *testing.T) string {
	raw := transporttest.BrokerURL(t, b.env, b.service)
	if b.query == nil {
		return raw
	}
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	return raw + sep + b.query(t)
}

// openT opens raw for the test's own checks.
func openT(t *testing.T, raw string) transport.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := transport.Open(ctx, raw)
	if err != nil {
		t.Fatalf("open %s: %v", transport.Redact(raw), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

// seed writes the messages, confirmed, a hundred at a time.
func seed(t *testing.T, tr transport.Transport, ms []*transport.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 0; i < len(ms); i += 100 {
		if err := transport.PublishConfirmed(ctx, tr, ms[i:min(i+100, len(ms))]); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
}

// browse returns every message on queue.
func browse(t *testing.T, tr transport.Transport, queue string) []*transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out []*transport.Delivery
	if err := transport.BrowseAll(ctx, tr, queue, 5000, func(d *transport.Delivery) bool {
		out = append(out, d)
		return true
	}); err != nil {
		t.Fatalf("browse %s: %v", queue, err)
	}
	return out
}

func groups(gs []dlq.Group) map[string]int {
	m := map[string]int{}
	for _, g := range gs {
		m[g.Key] = g.Count
	}
	return m
}

// TestOperateOnBrokers runs the operating commands on every real broker against a
// dead-letter queue of 1,000 mixed messages (failed, unknown URN, poison spliced and
// wrapped; producers php, python and go): stats counts match, a dry run moves none, a
// selective redrive moves exactly the selected ones with their bytes, keys and
// headers, and a redrive killed (SIGKILL) half way leaves every message in one of the
// two queues.
func TestOperateOnBrokers(t *testing.T) {
	binary(t)
	awsTestCredentials(t)
	for _, b := range opsBrokers() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testOperate(t, b)
		})
	}
}

func testOperate(t *testing.T, b opsBroker) {
	raw := b.url(t)
	q := transporttest.UniqueName("bqops")
	dq := b.dlq(q)
	if b.prepare != nil {
		b.prepare(t, raw, q, dq)
	}
	tr := openT(t, raw)
	s := dlqtest.Mixed(q, dq, 1000, time.Now())
	if !b.keys {
		for _, it := range s.Items {
			it.Message.Key = nil
		}
	}
	seed(t, tr, s.Messages())
	args := func(extra ...string) []string { return append(extra, "-queue", q, raw) }

	// stats
	var st struct {
		Broker string `json:"broker"`
		dlq.Stats
	}
	cliJSON(t, &st, args("dlq", "stats", "--json")...)
	if st.Total != 1000 || st.Queue != dq {
		t.Fatalf("stats: %d messages on %q, want 1000 on %q", st.Total, st.Queue, dq)
	}
	check := func(what string, got map[string]int, key func(dlqtest.Item) string) {
		t.Helper()
		want := map[string]int{}
		for _, it := range s.Items {
			want[key(it)]++
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("stats by %s:\n got %v\nwant %v", what, got, want)
		}
	}
	check("reason", groups(st.Reasons), func(it dlqtest.Item) string { return it.Reason })
	check("lang", groups(st.Langs), func(it dlqtest.Item) string { return it.Lang })
	check("urn", groups(st.URNs), func(it dlqtest.Item) string { return it.URN })
	check("error", groups(st.Errors), func(it dlqtest.Item) string { return it.Fingerprint })
	check("original queue", groups(st.OriginalQueues), func(dlqtest.Item) string { return q })
	if st.Oldest == nil || st.Newest == nil || !st.Oldest.Before(*st.Newest) {
		t.Errorf("stats oldest/newest: %v %v", st.Oldest, st.Newest)
	}
	if strings.Contains(st.Broker, "guest:guest") || strings.Contains(st.Broker, ":artemis@") {
		t.Errorf("stats shows the broker's password: %s", st.Broker)
	}

	// A dry run moves none.
	selected := func(it dlqtest.Item) bool { return it.Reason == "failed" && it.Lang == "python" }
	want := s.Count(selected)
	sel := []string{"--select", "reason=failed", "--select", "lang=python"}
	var dry struct {
		dlq.Result
		Items []dlq.Item `json:"items"`
	}
	cliJSON(t, &dry, args(append([]string{"dlq", "redrive", "--dry-run", "--json"}, sel...)...)...)
	if !dry.DryRun || dry.Moved != want || len(dry.Items) != want || dry.Kept != 1000-want {
		t.Fatalf("dry run: moved %d kept %d items %d, want %d would move", dry.Moved, dry.Kept, len(dry.Items), want)
	}
	if n := len(browse(t, tr, dq)); n != 1000 {
		t.Fatalf("after a dry run the DLQ holds %d, want 1000", n)
	}
	if n := len(browse(t, tr, q)); n != 0 {
		t.Fatalf("after a dry run the work queue holds %d, want 0", n)
	}

	// A selective redrive moves exactly the selected ones.
	var res struct {
		dlq.Result
		Items []dlq.Item `json:"items"`
	}
	cliJSON(t, &res, args(append([]string{"dlq", "redrive", "--json"}, sel...)...)...)
	if res.Moved != want || res.To[q] != want {
		t.Fatalf("redrive: %+v, want %d moved to %s", res.Result, want, q)
	}
	byRedriven := map[string]dlqtest.Item{}
	byBody := map[string]dlqtest.Item{}
	for _, it := range s.Items {
		byRedriven[string(it.Redriven)] = it
		byBody[string(it.Message.Body)] = it
	}
	work := browse(t, tr, q)
	if len(work) != want {
		t.Fatalf("the work queue holds %d after the redrive, want %d", len(work), want)
	}
	for _, d := range work {
		it, ok := byRedriven[string(d.Body)]
		if !ok {
			t.Fatalf("the work queue holds a body that is not a redriven original: %.120s", d.Body)
		}
		if !selected(it) {
			t.Errorf("moved a message that was not selected: %s %s", it.Reason, it.Lang)
		}
		if fmt.Sprint(d.Headers) != fmt.Sprint(it.Message.Headers) {
			t.Errorf("headers %v, want %v", d.Headers, it.Message.Headers)
		}
		if wantKey := b.keyOf(it.Message.Key); !bytes.Equal(d.Key, wantKey) || (d.Key == nil) != (wantKey == nil) {
			t.Errorf("key %q, want %q", d.Key, wantKey)
		}
	}
	left := browse(t, tr, dq)
	if len(left) != 1000-want {
		t.Fatalf("the DLQ holds %d after the redrive, want %d", len(left), 1000-want)
	}
	for _, d := range left {
		if it, ok := byBody[string(d.Body)]; !ok || selected(it) {
			t.Fatalf("the DLQ holds a changed or a selected message: %.300s", d.Body)
		}
	}

	// Killed half way, every message is in exactly one of the two queues.
	testKill(t, b, raw, tr, s, q, dq)
}

// testKill starts a redrive of every envelope left, kills it once it has moved some,
// and checks that every seeded message is on the DLQ or the work queue, once.
func testKill(t *testing.T, b opsBroker, raw string, tr transport.Transport, s dlqtest.Seed, q, dq string) {
	before := len(browse(t, tr, q))
	// The redrive's progress bar, on a terminal, says how far it got.
	run := startOnTerminal(t, "dlq", "redrive", "-queue", q, raw)
	if !run.waitFor(90*time.Second, func(screen string) bool { return lastMoved(screen) >= 1 }) {
		_ = run.cmd.Process.Kill()
		_ = run.cmd.Wait()
		t.Fatalf("the redrive moved nothing in 90s: %s", run.screen())
	}
	time.Sleep(20 * time.Millisecond) // well into the run, on the slowest broker as on the fastest
	if err := run.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := run.cmd.Wait(); err == nil {
		t.Fatalf("the redrive finished before it was killed; nothing was tested:\n%s", run.screen())
	}
	time.Sleep(b.settleAfterKill)
	counts := map[string][2]int{} // original DLQ body → copies on the DLQ, on the work queue
	byBody := map[string]string{}
	byRedriven := map[string]string{}
	for _, it := range s.Items {
		byBody[string(it.Message.Body)] = string(it.Message.Body)
		byRedriven[string(it.Redriven)] = string(it.Message.Body)
	}
	dlqBodies := [][]byte{}
	for _, d := range browse(t, tr, dq) {
		dlqBodies = append(dlqBodies, d.Body)
	}
	if b.reserved != nil {
		dlqBodies = append(dlqBodies, b.reserved(t, raw, dq)...)
	}
	for _, body := range dlqBodies {
		k, ok := byBody[string(body)]
		if !ok {
			t.Fatalf("the DLQ holds a message that was not seeded: %.120s", body)
		}
		c := counts[k]
		c[0]++
		counts[k] = c
	}
	work := browse(t, tr, q)
	for _, d := range work {
		k, ok := byRedriven[string(d.Body)]
		if !ok {
			t.Fatalf("the work queue holds a message that is not a redriven one: %.120s", d.Body)
		}
		c := counts[k]
		c[1]++
		counts[k] = c
	}
	lost, dups := 0, 0
	for _, it := range s.Items {
		c := counts[string(it.Message.Body)]
		switch n := c[0] + c[1]; {
		case n == 0:
			lost++
		case n > 1:
			dups++
		}
	}
	t.Logf("%s: killed after %d moved; %d on the DLQ, %d on the work queue, %d lost, %d in both or twice",
		b.name, len(work)-before, len(dlqBodies), len(work), lost, dups)
	if lost > 0 {
		t.Errorf("%d message(s) lost by a killed redrive", lost)
	}
	if dups > b.maxDuplicates {
		t.Errorf("%d message(s) in both queues after a kill, want at most %d", dups, b.maxDuplicates)
	}
}

// terminalRun is the binary running with its stderr on a terminal (a pty).
type terminalRun struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

// startOnTerminal starts the binary with stderr on a pseudo-terminal, as a user's
// shell runs it; stdout is captured apart.
func startOnTerminal(t *testing.T, args ...string) *terminalRun {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("pty: %v", err)
	}
	r := &terminalRun{cmd: exec.Command(binary(t), args...), done: make(chan struct{})}
	r.cmd.Stderr = tty
	r.cmd.Stdout = &lockedWriter{mu: &r.mu, w: &r.out}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = tty.Close()
	go func() {
		defer close(r.done)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			r.mu.Lock()
			r.out.Write(buf[:n])
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			_ = r.cmd.Wait()
		}
		_ = ptmx.Close()
		<-r.done
	})
	return r
}

// screen is everything the run wrote so far.
func (r *terminalRun) screen() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// waitFor polls the screen until ok holds or timeout passes.
func (r *terminalRun) waitFor(timeout time.Duration, ok func(string) bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if ok(r.screen()) {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

var movedRE = regexp.MustCompile(`\] (\d+)/\d+`)

// lastMoved reads the last count the progress bar drew.
func lastMoved(screen string) int {
	m := movedRE.FindAllStringSubmatch(screen, -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// redisReserved returns what a killed consumer left reserved on the DLQ (its
// processing list), which the next consumer's sweep puts back once the reservation
// lapses.
func redisReserved(t *testing.T, raw, dq string) [][]byte {
	t.Helper()
	tr := openT(t, raw)
	// The processing list is a list of its own: browse it as a queue.
	var out [][]byte
	for _, d := range browse(t, tr, dq+":processing") {
		out = append(out, d.Body)
	}
	return out
}

// awsTestCredentials gives the AWS default chain ElasticMQ's dummy keys when the
// environment has none (the test's own clients and the binaries it runs).
func awsTestCredentials(t *testing.T) {
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		t.Setenv("AWS_ACCESS_KEY_ID", "x")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "x")
	}
}

// sqsShortVisibility creates the dead-letter queue with a visibility timeout of 2s, so
// the messages a killed consumer held are back in seconds, not the default 30.
func sqsShortVisibility(t *testing.T, raw, _, dq string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(u.Hostname()))
	if err != nil {
		t.Fatal(err)
	}
	endpoint := u.Query().Get("endpoint")
	client := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	if _, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{
		QueueName:  aws.String(dq),
		Attributes: map[string]string{"VisibilityTimeout": "2"},
	}); err != nil {
		t.Fatalf("create %s: %v", dq, err)
	}
	t.Cleanup(func() {
		for _, name := range []string{dq, strings.TrimSuffix(dq, "-dlq")} {
			if out, err := client.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(name)}); err == nil {
				_, _ = client.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
			}
		}
	})
}
