package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/outbox/pgstore"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// process is the babelqueue command running in a process of its own.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr transporttest.LogBuffer // written while the test reads them
	done           chan struct{}           // closed once it exited
	err            error                   // cmd.Wait's, once done is closed
}

// startProcess starts the binary with args; it is killed when the test ends if it still runs.
func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(binary(t), args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// terminate sends SIGTERM and waits for the process to exit, for at most limit: it
// returns how long that took and the exit code, or fails the test (and kills the
// process) if it is still running then.
func (p *process) terminate(t *testing.T, limit time.Duration) (took time.Duration, code int) {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("still running %s after SIGTERM\nstdout: %s\nstderr: %s", limit, p.stdout.String(), p.stderr.String())
	}
	took = time.Since(start)
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return took, ee.ExitCode()
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return took, 0
}

// outboxRows writes rows to an outbox table for the relay tests, each in a
// transaction of its own batch, with data {"n": i}.
type outboxRows struct {
	db    *sql.DB
	table string
	w     *outbox.Writer
}

func newOutboxRows(t *testing.T, dsn, table, queue string) *outboxRows {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	store, err := pgstore.New(db, pgstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	app, err := babelqueue.New(memory.New(), babelqueue.WithQueue(queue))
	if err != nil {
		t.Fatal(err)
	}
	return &outboxRows{db: db, table: table, w: outbox.NewWriter(app, store)}
}

// write commits rows from to from+n-1.
func (o *outboxRows) write(t *testing.T, from, n int) {
	t.Helper()
	ctx := context.Background()
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := from; i < from+n; i++ {
		if _, err := o.w.Write(ctx, tx, "urn:babel:cli:shutdown", map[string]int{"n": i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// rows counts what the table holds (the relay deletes a row once it is published).
func (o *outboxRows) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := o.db.QueryRow("SELECT count(*) FROM " + o.table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The relay command's database and broker connections go silent (open, no byte
// through) while it publishes; SIGTERM stops it within its grace all the same, its
// standard error says why the batch in hand did not finish, and nothing is lost: once
// the network heals, a relay run publishes what is left and every row written is on
// the broker (at least once).
func TestOutboxRelayStopsOnSilentConnections(t *testing.T) {
	t.Parallel()
	dsn := transporttest.BrokerURL(t, "BQ_POSTGRES_URL", "postgres")
	redisURL := transporttest.BrokerURL(t, "BQ_REDIS_URL", "redis")
	table := "bqtest_cli_" + transporttest.UniqueName("t")[2:]
	queue := transporttest.UniqueName("outboxtest-term")
	rows := newOutboxRows(t, dsn, table, queue)
	dbProxy, dbURL := faultproxy.StartURL(t, dsn)
	brokerProxy, brokerURL := faultproxy.StartURL(t, redisURL)

	const grace = 5 * time.Second
	relay := startProcess(t, "outbox", "relay", "-db", dbURL, "-table", table, "-batch", "10", "-poll", "20ms",
		"-progress", "0", "-grace", grace.String(), brokerURL)
	t.Cleanup(dbProxy.Thaw)
	t.Cleanup(brokerProxy.Thaw)
	const n = 3000
	rows.write(t, 0, 200)
	for deadline := time.Now().Add(60 * time.Second); rows.rows(t) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the relay left %d rows in 60s; stderr: %s", rows.rows(t), relay.stderr.String())
		}
	}
	rows.write(t, 200, n-200)
	for rows.rows(t) == n-200 { // the relay is under way
		time.Sleep(5 * time.Millisecond)
	}
	dbProxy.Freeze()
	brokerProxy.Freeze()
	time.Sleep(time.Second) // the calls in hand wait on the silent connections
	// Within the grace, and the time a loaded machine takes to start and end a process.
	took, code := relay.terminate(t, grace+5*time.Second)
	t.Logf("the relay exited %d %s after SIGTERM; stdout: %q; stderr: %q", code, took.Round(100*time.Millisecond), relay.stdout.String(), relay.stderr.String())
	if code == 0 && !strings.Contains(relay.stderr.String(), "did not answer") {
		t.Errorf("the relay exited 0 without saying its connections did not answer: %q", relay.stderr.String())
	}
	if code != 0 && !strings.Contains(relay.stderr.String(), "did not finish within the -grace of 5s") {
		t.Errorf("the relay exited %d without saying the batch did not finish within its grace: %q", code, relay.stderr.String())
	}

	// Healed: what is left goes out, and every row is on the broker.
	dbProxy.Thaw()
	brokerProxy.Thaw()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"outbox", "relay", "-db", dsn, "-table", table, "-progress", "0", "-drain", redisURL}, &out, &errb); code != 0 {
		t.Fatalf("the relay after the heal: exit %d: %s%s", code, out.String(), errb.String())
	}
	tr, err := transport.Open(ctx, redisURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	t.Cleanup(func() { cleanQueue(tr, queue) })
	c, err := tr.Consume(ctx, queue, transport.ConsumeOptions{Prefetch: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	seen := map[int]int{}
	for len(seen) < n {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		d, err := c.Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("%d of %d rows on the broker: %v", len(seen), n, err)
		}
		var m struct {
			Data struct{ N int } `json:"data"`
		}
		if err := json.Unmarshal(d.Body, &m); err != nil {
			t.Fatal(err)
		}
		seen[m.Data.N]++
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	dups := 0
	for _, k := range seen {
		dups += k - 1
	}
	t.Logf("%d rows on the broker, %d twice or more", n, dups)
}

// The console's broker connections go silent (open, no byte through) while it counts
// the queues, serves a page and moves a redrive of the whole dead-letter queue;
// SIGTERM stops it within its grace all the same, its standard error says what did not
// finish, and nothing is lost: once the network heals, every message is on the work
// queue or still on the dead-letter queue.
func TestConsoleStopsOnSilentConnections(t *testing.T) {
	t.Parallel()
	raw, tr, s := seedRedis(t, 3000)
	proxy, proxied := faultproxy.StartURL(t, raw)
	const grace = 5 * time.Second
	console := startProcess(t, "console", "-listen", "127.0.0.1:0", "-interval", "200ms", "-grace", grace.String(), proxied+"#"+s.Queue)
	t.Cleanup(proxy.Thaw)
	var addr string
	for deadline := time.Now().Add(60 * time.Second); addr == ""; time.Sleep(20 * time.Millisecond) {
		if m := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/)`).FindStringSubmatch(console.stderr.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("the console did not say where it listens in 60s: %s", console.stderr.String())
		}
	}
	session := newConsoleSession(t, addr)
	dlqPage := "/api/dlq?" + url.Values{"b": {"0"}, "q": {s.DLQ}}.Encode()
	var page struct {
		Total int `json:"total"`
	}
	session.get(dlqPage+"&wait=1", &page)
	if page.Total != 3000 {
		t.Fatalf("the console reads %d messages on the DLQ, want 3000", page.Total)
	}
	body, _ := json.Marshal(map[string]any{"b": 0, "q": s.DLQ, "all": true, "confirm": true, "bypass": true})
	if resp, out := session.do("POST", "/api/redrive", "application/json", bytes.NewReader(body)); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("redrive: %d %s", resp.StatusCode, out)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, err := tr.(transport.QueueStatter).QueueStats(context.Background(), s.Queue); err == nil && st.Ready > 0 {
			break // the redrive is under way
		}
		if time.Now().After(deadline) {
			t.Fatal("the redrive moved nothing in 30s")
		}
	}
	proxy.Freeze()
	go func() { // a page read waiting on the silent connection
		req, _ := http.NewRequest("GET", strings.TrimRight(addr, "/")+dlqPage+"&refresh=1", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}()
	time.Sleep(time.Second) // the calls in hand wait on the silent connection
	// Within the grace, and the time a loaded machine takes to start and end a process.
	took, code := console.terminate(t, grace+5*time.Second)
	t.Logf("the console exited %d %s after SIGTERM; stderr: %q", code, took.Round(100*time.Millisecond), console.stderr.String())
	if code == 0 && !strings.Contains(console.stderr.String(), "stopped=interrupted") {
		t.Errorf("the console exited 0 without saying its redrive was interrupted: %q", console.stderr.String())
	}
	if code != 0 && !strings.Contains(console.stderr.String(), "did not stop within the -grace of 5s") {
		t.Errorf("the console exited %d without saying it did not stop within its grace: %q", code, console.stderr.String())
	}

	// Healed: every message is on one queue or the other, ready or reserved (a
	// delivery the redrive held when it stopped comes back to the DLQ once its
	// reservation lapses). A move the console sent into the frozen network reaches Redis
	// at the thaw, as TCP delivers what it sent once a partition heals, though the
	// console is gone: the message is then on the work queue. Counted until two looks
	// agree, since the two queues cannot be read at one instant while such a move lands.
	proxy.Thaw()
	count := func(queue string) int64 {
		st, err := tr.(transport.QueueStatter).QueueStats(context.Background(), queue)
		if err != nil {
			t.Fatal(err)
		}
		return st.Ready + st.InFlight + st.Delayed
	}
	var work, left int64
	for deadline, prev := time.Now().Add(10*time.Second), [2]int64{-1, -1}; ; time.Sleep(200 * time.Millisecond) {
		work, left = count(s.Queue), count(s.DLQ)
		if [2]int64{work, left} == prev && (work+left >= 3000 || time.Now().After(deadline)) {
			break
		}
		prev = [2]int64{work, left}
	}
	t.Logf("the work queue holds %d and the DLQ %d of 3000", work, left)
	if work+left < 3000 {
		t.Fatalf("the work queue holds %d and the DLQ %d: %d of 3000 lost", work, left, 3000-work-left)
	}
}
