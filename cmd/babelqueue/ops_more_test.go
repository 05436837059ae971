package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func redisURL(t *testing.T) string { return transporttest.BrokerURL(t, "BQ_REDIS_URL", "redis") }

// seedRedis writes n mixed dead letters for a new work queue on Redis.
func seedRedis(t *testing.T, n int) (string, transport.Transport, dlqtest.Seed) {
	raw := redisURL(t)
	tr := openT(t, raw)
	q := transporttest.UniqueName("bqops")
	s := dlqtest.Mixed(q, q+".dlq", n, time.Now())
	seed(t, tr, s.Messages())
	return raw, tr, s
}

// TestCtrlCSaysWhatMoved interrupts a redrive with SIGINT, as Ctrl-C does: it stops,
// says how many it moved (exit 130), and that number is what the queues show.
func TestCtrlCSaysWhatMoved(t *testing.T) {
	raw, tr, s := seedRedis(t, 3000)
	run := startOnTerminal(t, "dlq", "redrive", "-queue", s.Queue, raw)
	if !run.waitFor(60*time.Second, func(screen string) bool { return lastMoved(screen) >= 50 }) {
		t.Fatalf("no progress: %s", run.screen())
	}
	if err := run.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := run.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("interrupted redrive: %v\n%s", err, run.screen())
	}
	screen := run.screen()
	var moved int
	if _, err := fmt.Sscanf(screen[strings.Index(screen, "moved "):], "moved %d message(s)", &moved); err != nil {
		t.Fatalf("the summary does not say what moved: %v\n%s", err, screen)
	}
	if !strings.Contains(screen, "interrupted") {
		t.Errorf("the summary does not say it was interrupted:\n%s", screen)
	}
	work, left := len(browse(t, tr, s.Queue)), len(browse(t, tr, s.DLQ))
	if moved < 50 || work != moved || left != 3000-moved {
		t.Fatalf("said %d moved; the work queue holds %d and the DLQ %d (of 3000)", moved, work, left)
	}
}

// TestProgressBarOnlyOnTerminal: the bar is drawn on a terminal and never in a pipe.
func TestProgressBarOnlyOnTerminal(t *testing.T) {
	raw, _, s := seedRedis(t, 200)
	run := startOnTerminal(t, "dlq", "redrive", "--dry-run", "-queue", s.Queue, raw)
	if err := run.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if screen := run.screen(); !strings.Contains(screen, "\r\x1b[K") || !strings.Contains(screen, "dry run "+s.DLQ+" ") || !strings.Contains(screen, "would move 160") {
		t.Errorf("no progress bar on the terminal:\n%q", screen)
	}
	r := cli(t, "dlq", "redrive", "--dry-run", "-queue", s.Queue, raw)
	if r.code != 0 || strings.Contains(r.stderr, "\r") || strings.Contains(r.stdout, "\r") || !strings.Contains(r.stdout, "dry run: would move 160 message(s)") {
		t.Errorf("piped output: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestListAndShow pages through a DLQ and shows messages, in text and JSON, and the
// raw bytes exactly.
func TestListAndShow(t *testing.T) {
	raw, _, s := seedRedis(t, 30)
	var page struct {
		Entries []struct {
			ID         string `json:"id"`
			Poison     bool   `json:"poison"`
			DeadLetter *struct {
				Reason string `json:"reason"`
			} `json:"dead_letter"`
		} `json:"entries"`
		Next string `json:"next"`
		End  bool   `json:"end"`
	}
	cliJSON(t, &page, "dlq", "ls", "--limit", "12", "--json", "-queue", s.Queue, raw)
	if len(page.Entries) != 12 || page.End || page.Next == "" {
		t.Fatalf("first page: %d entries, end %v, next %q", len(page.Entries), page.End, page.Next)
	}
	ids := []string{}
	for _, e := range page.Entries {
		ids = append(ids, e.ID)
	}
	next := page.Next
	page.Entries = nil // a fresh slice: JSON leaves the members a poison entry lacks as they were
	cliJSON(t, &page, "dlq", "ls", "--cursor", next, "--limit", "100", "--json", "-queue", s.Queue, raw)
	if len(page.Entries) != 18 || !page.End {
		t.Fatalf("second page: %d entries, end %v", len(page.Entries), page.End)
	}
	for _, e := range page.Entries {
		ids = append(ids, e.ID)
	}
	for i, it := range s.Items {
		if ids[i] != it.ID {
			t.Fatalf("entry %d is %q, want %q", i, ids[i], it.ID)
		}
	}
	r := cli(t, "dlq", "ls", "--limit", "5", "--select", "reason=unknown_urn", "-queue", s.Queue, raw)
	if r.code != 0 || !strings.Contains(r.stdout, "REASON") || strings.Count(r.stdout, "unknown_urn") != 5 || !strings.Contains(r.stdout, "next page: -cursor ") {
		t.Errorf("dlq ls text:\n%s%s", r.stdout, r.stderr)
	}

	it := s.Items[1]
	r = cli(t, "dlq", "show", "-queue", s.Queue, raw, it.ID)
	for _, want := range []string{"Message " + it.ID, "Dead letter", "reason          failed", "original_queue  " + s.Queue, "\"order_id\": 1001", "lang"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dlq show lacks %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	var one struct {
		ID   string          `json:"id"`
		Data json.RawMessage `json:"data"`
		Body *string         `json:"body"`
		Key  *string         `json:"key"`
	}
	cliJSON(t, &one, "dlq", "show", "--json", "--raw", "-queue", s.Queue, raw, it.ID)
	if one.ID != it.ID || one.Body == nil || *one.Body != string(it.Message.Body) || !bytes.Contains(one.Data, []byte(`"order_id":1001`)) {
		t.Errorf("dlq show --json: %+v", one)
	}
	r = cli(t, "dlq", "show", "--raw", "-queue", s.Queue, raw, "#10")
	if r.code != 0 || r.stdout != string(s.Items[9].Message.Body) {
		t.Errorf("dlq show --raw #10:\n got %q\nwant %q", r.stdout, s.Items[9].Message.Body)
	}
	r = cli(t, "dlq", "show", "-queue", s.Queue, raw, "#10")
	if !strings.Contains(r.stdout, "not an envelope (poison, wrapped)") || !strings.Contains(r.stdout, "Original body") || !strings.Contains(r.stdout, string(s.Items[9].Redriven)) {
		t.Errorf("dlq show of a wrapped poison:\n%s", r.stdout)
	}
	if r := cli(t, "dlq", "show", "-queue", s.Queue, raw, "nope"); r.code != 1 || !strings.Contains(r.stderr, `no message with meta.id "nope"`) {
		t.Errorf("show of a missing id: %d %s", r.code, r.stderr)
	}
}

// TestErrorsNameTheBrokerWithoutItsPassword: what a user sees when a broker is down or
// the command is wrong, in text and JSON.
func TestErrorsNameTheBrokerWithoutItsPassword(t *testing.T) {
	binary(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"dlq", "stats", "redis://u:hunter2@127.0.0.1:1/0"}, 1, "127.0.0.1:1"},
		{[]string{"dlq", "stats", "--json", "amqp://guest:hunter2@127.0.0.1:1/"}, 1, `"error":"amqp`},
		{[]string{"bridge", "--queue", "q", "redis://:hunter2@127.0.0.1:1/0", "memory://"}, 1, "redis://:xxxxx@127.0.0.1:1/0"},
		{[]string{"tail", "--trace", "t", "--json", "redis://u:hunter2@127.0.0.1:1/0"}, 1, `"command":"tail"`},
		{[]string{"dlq", "redrive", "--select", "colour=red", "memory://"}, 2, "unknown field"},
		{[]string{"dlq", "redrive", "--json", "--select", "age>forever", "memory://"}, 2, `"error":"dlq: bad selection`},
		{[]string{"dlq"}, 2, "want a subcommand"},
		{[]string{"bridge", "memory://"}, 2, "a source and a destination"},
		{[]string{"tail", "memory://"}, 2, "-trace is required"},
	} {
		r := cli(t, c.args...)
		all := r.stdout + r.stderr
		if r.code != c.code || !strings.Contains(all, c.want) {
			t.Errorf("%v: exit %d, want %d with %q:\n%s", c.args, r.code, c.code, c.want, all)
		}
		if strings.Contains(all, "hunter2") {
			t.Errorf("%v shows the password:\n%s", c.args, all)
		}
	}
}

// bridgeCase writes messages to a source queue, bridges it and checks the
// destination holds the same bytes, keys and headers.
func bridgeCase(t *testing.T, srcRaw, dstRaw string, keys, textOnly, ordered, copyMode bool) {
	src, dst := openT(t, srcRaw), openT(t, dstRaw)
	q := transporttest.UniqueName("bqbridge")
	var ms []*transport.Message
	for i := range 120 {
		env, err := envelope.Make("urn:babel:orders:created", map[string]any{"n": i, "s": "ü<&>"}, envelope.WithQueue(q))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := env.Encode()
		m := &transport.Message{Queue: q, Body: body, Attempts: i % 3, Projection: transport.Projection{
			URN: env.Job, TraceID: env.TraceID, MessageID: env.Meta.ID, Lang: env.Meta.Lang, SchemaVersion: 1, CreatedAt: env.Meta.CreatedAt,
		}}
		if b, err := envelope.SetAttempts(body, i%3); err == nil {
			m.Body = b
		}
		switch {
		case i%10 == 9:
			m = &transport.Message{Queue: q, Body: []byte(fmt.Sprintf("poison #%d, not JSON", i))}
		case i%10 == 8 && !textOnly:
			m = &transport.Message{Queue: q, Body: []byte{0xff, 0xfe, byte(i)}}
		}
		if i%2 == 0 {
			m.Headers = map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", i+1, i+1), "x-tenant": "acme"}
		}
		if keys {
			switch i % 3 {
			case 0:
				m.Key = []byte(fmt.Sprintf("k%d", i%5))
			case 1:
				m.Key = []byte{}
			}
		}
		ms = append(ms, m)
	}
	seed(t, src, ms)
	args := []string{"bridge", "--json", "--queue", q, srcRaw, dstRaw}
	if copyMode {
		args = append(args, "--copy")
	}
	var res struct {
		Count int    `json:"count"`
		From  string `json:"from"`
	}
	cliJSON(t, &res, args...)
	if res.Count != len(ms) {
		t.Fatalf("bridge carried %d, want %d", res.Count, len(ms))
	}
	got := browse(t, dst, q)
	describe := func(body, key []byte, h map[string]string) string {
		ks := "<nil>"
		if key != nil {
			ks = fmt.Sprintf("%q", key)
		}
		hs := make([]string, 0, len(h))
		for k, v := range h {
			hs = append(hs, k+"="+v)
		}
		sort.Strings(hs)
		return fmt.Sprintf("%q key=%s %v", body, ks, hs)
	}
	var want, have []string
	for _, m := range ms {
		want = append(want, describe(m.Body, m.Key, m.Headers))
	}
	for _, d := range got {
		have = append(have, describe(d.Body, d.Key, d.Headers))
	}
	if !ordered {
		sort.Strings(want)
		sort.Strings(have)
	}
	if strings.Join(have, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the destination does not hold the source's messages byte for byte:\n got %d: %.600s\nwant %d: %.600s", len(have), strings.Join(have, "\n"), len(want), strings.Join(want, "\n"))
	}
	left := len(browse(t, src, q))
	if copyMode && left != len(ms) || !copyMode && left != 0 {
		t.Errorf("the source holds %d after the bridge (copy %v)", left, copyMode)
	}
}

// TestBridge moves queues between brokers: RabbitMQ to Kafka and Redis to SQS, and
// copies a keyed Kafka topic to SQS.
func TestBridge(t *testing.T) {
	binary(t)
	awsTestCredentials(t)
	amqpURL := transporttest.BrokerURL(t, "BQ_AMQP_URL", "rabbitmq")
	kafkaURL := transporttest.BrokerURL(t, "BQ_KAFKA_URL", "kafka") + "?group=" + transporttest.UniqueName("bqbridge")
	sqsURL := transporttest.BrokerURL(t, "BQ_SQS_URL", "sqs")
	t.Run("RabbitMQToKafka", func(t *testing.T) {
		t.Parallel()
		bridgeCase(t, amqpURL, kafkaURL, false, false, true, false)
	})
	t.Run("RedisToSQS", func(t *testing.T) {
		t.Parallel()
		bridgeCase(t, redisURL(t), sqsURL, false, true, false, false)
	})
	t.Run("KafkaToSQSCopyWithKeys", func(t *testing.T) {
		t.Parallel()
		bridgeCase(t, kafkaURL, sqsURL, true, true, false, true)
	})
}

// TestTailFollowsATrace watches a queue on Redis and a topic on Kafka for one trace:
// the messages of the trace are shown as they arrive and leave; others are not.
func TestTailFollowsATrace(t *testing.T) {
	binary(t)
	rURL := redisURL(t)
	kURL := transporttest.BrokerURL(t, "BQ_KAFKA_URL", "kafka") + "?group=" + transporttest.UniqueName("bqtail")
	rtr, ktr := openT(t, rURL), openT(t, kURL)
	qa, qb := transporttest.UniqueName("bqtail"), transporttest.UniqueName("bqtail")
	trace := envelope.NewUUID()
	cmd := exec.Command(binary(t), "tail", "--json", "--trace", trace, "--for", "20s", rURL+"#"+qa, kURL+"#"+qb)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	events := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
		close(events)
	}()
	msg := func(q, tr string) *transport.Message {
		env, err := envelope.Make("urn:babel:orders:created", map[string]int{"n": 1}, envelope.WithQueue(q), envelope.WithTraceID(tr))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := env.Encode()
		return &transport.Message{Queue: q, Body: body, Projection: transport.Projection{URN: env.Job, TraceID: tr, MessageID: env.Meta.ID, Lang: "go", SchemaVersion: 1, CreatedAt: env.Meta.CreatedAt}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	next := func(what string) map[string]any {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("tail ended before %s: %s", what, errb.String())
			}
			return ev
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s within 30s: %s", what, errb.String())
			return nil
		}
	}
	for _, m := range []*transport.Message{msg(qa, envelope.NewUUID()), msg(qa, trace)} {
		if err := rtr.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if ev := next("the Redis arrival"); ev["event"] != "arrived" || ev["queue"] != qa || !strings.HasPrefix(ev["broker"].(string), "redis://") {
		t.Fatalf("first event %v", ev)
	}
	if err := transport.PublishConfirmed(ctx, ktr, []*transport.Message{msg(qb, trace)}); err != nil {
		t.Fatal(err)
	}
	if ev := next("the Kafka arrival"); ev["event"] != "arrived" || ev["queue"] != qb || !strings.HasPrefix(ev["broker"].(string), "kafka://") {
		t.Fatalf("second event %v", ev)
	}
	// A worker takes both Redis messages: the trace's one is seen leaving.
	c, err := rtr.Consume(ctx, qa, transport.ConsumeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		d, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Close(ctx)
	if ev := next("the Redis departure"); ev["event"] != "left" || ev["queue"] != qa {
		t.Fatalf("third event %v", ev)
	}
}

// TestReplayInterop: a redrive with bypass is a replay on the other side, both ways,
// on Redis. The Python SDK's redrive with bypass=True is seen by a Go handler as a
// replay (IsReplay, UnlessReplay skips its effect); ours is seen by a Python handler
// as one (is_replay, bypass_external_effects skips it). Without bypass neither is.
func TestReplayInterop(t *testing.T) {
	py := pyinterop.Python(t)
	_ = py
	script := pyinterop.Script(t, "redrive_peer.py")
	raw := redisURL(t)
	tr := openT(t, raw)

	// Python redrives, Go handles.
	for _, bypass := range []bool{true, false} {
		q := transporttest.UniqueName("bqreplay")
		s := dlqtest.Mixed(q, q+".dlq", 2, time.Now()) // two failed envelopes
		seed(t, tr, s.Messages())
		flag := "0"
		if bypass {
			flag = "1"
		}
		out := pyinterop.Run(t, time.Minute, nil, script, "redrive", raw, q, s.DLQ, flag)
		var res struct {
			Redriven int    `json:"redriven"`
			Bypassed []bool `json:"bypassed"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil || res.Redriven != 2 {
			t.Fatalf("python redrive: %s (%v)", out, err)
		}
		seen := handleInGo(t, tr, q, 2)
		for _, h := range seen {
			if h.replay != bypass || h.effect == bypass {
				t.Errorf("python redrive (bypass %v) seen by Go: replay %v, effect ran %v", bypass, h.replay, h.effect)
			}
		}
	}

	// Go redrives (the command), Python handles.
	for _, bypass := range []bool{true, false} {
		q := transporttest.UniqueName("bqreplay")
		s := dlqtest.Mixed(q, q+".dlq", 2, time.Now())
		seed(t, tr, s.Messages())
		args := []string{"dlq", "redrive", "--json", "-queue", q, raw}
		if bypass {
			args = append(args, "--bypass")
		}
		var res dlq.Result
		cliJSON(t, &res, args...)
		if res.Moved != 2 {
			t.Fatalf("redrive moved %d", res.Moved)
		}
		out := pyinterop.Run(t, time.Minute, nil, script, "handle", raw, q, "2")
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 2 {
			t.Fatalf("python handled: %s", out)
		}
		for _, l := range lines {
			var h struct {
				Replay bool `json:"replay"`
				Effect bool `json:"effect"`
			}
			if err := json.Unmarshal([]byte(l), &h); err != nil {
				t.Fatal(err)
			}
			if h.Replay != bypass || h.Effect == bypass {
				t.Errorf("go redrive (bypass %v) seen by Python: %s", bypass, l)
			}
		}
	}
}

type handled struct{ replay, effect bool }

// handleInGo runs the Go runtime on queue until it handled n messages, recording
// what IsReplay said and whether UnlessReplay ran its effect.
func handleInGo(t *testing.T, tr transport.Transport, queue string, n int) []handled {
	t.Helper()
	app, err := babelqueue.New(tr, babelqueue.WithQueue(queue), babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []handled
	done := make(chan struct{})
	h := func(ctx context.Context, m *babelqueue.Message) error {
		ran := false
		_ = babelqueue.UnlessReplay(ctx, func() error { ran = true; return nil })
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, handled{replay: babelqueue.IsReplay(ctx), effect: ran})
		if len(seen) == n {
			close(done)
		}
		return nil
	}
	app.Handle(dlqtest.URNOrders, h)
	app.Handle(dlqtest.URNPayments, h)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- app.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the Go handler saw %d of %d messages", len(seen), n)
	}
	cancel()
	<-stopped
	mu.Lock()
	defer mu.Unlock()
	return append([]handled(nil), seen...)
}

// TestJSONOnTheOtherCommands: version, publish and consume take -json too.
func TestJSONOnTheOtherCommands(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"version", "-json"}, &out, &errb); code != 0 {
		t.Fatalf("version -json: %d %s", code, errb.String())
	}
	var v struct {
		Version string   `json:"version"`
		Schemes []string `json:"schemes"`
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.Version == "" || len(v.Schemes) == 0 {
		t.Errorf("version -json: %s (%v)", out.String(), err)
	}
	out.Reset()
	if code := run(context.Background(), []string{"publish", "-json", "-urn", "urn:babel:x", "-data", `{"a":1}`, "memory://"}, &out, &errb); code != 0 {
		t.Fatalf("publish -json: %d %s", code, errb.String())
	}
	var p map[string]string
	if err := json.Unmarshal(out.Bytes(), &p); err != nil || p["urn"] != "urn:babel:x" || p["id"] == "" {
		t.Errorf("publish -json: %s (%v)", out.String(), err)
	}
	out.Reset()
	raw, tr, s := seedRedis(t, 3)
	if code := run(context.Background(), []string{"consume", "-json", "-keep", "-n", "3", "-queue", s.DLQ, raw}, &out, &errb); code != 0 {
		t.Fatalf("consume -json: %d %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"id":"`+s.Items[0].ID+`"`) || !strings.Contains(lines[0], `"dead_letter":{"reason":"failed"`) {
		t.Errorf("consume -json:\n%s", out.String())
	}
	if n := len(browse(t, tr, s.DLQ)); n != 3 {
		t.Errorf("consume -keep took messages: %d left", n)
	}
}
