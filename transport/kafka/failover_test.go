package kafka_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// holdEnv makes the test binary a worker that joins a group, takes one delivery of the
// queue and holds it without settling until it is killed (see TestMain).
const holdEnv = "BQ_KAFKA_TEST_HOLD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(holdEnv); spec != "" {
		os.Exit(holdWorker(spec))
	}
	os.Exit(m.Run())
}

// holdWorker is the child process of TestKilledWorkerReleasesPartitions: spec is
// "<url> <queue>". It prints "held <body>" once it holds a delivery, then waits to be
// killed.
func holdWorker(spec string) int {
	raw, queue, _ := strings.Cut(spec, " ")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := kafka.Open(ctx, raw)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	c, err := tr.Consume(ctx, queue, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	d, err := c.Receive(ctx)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("held", string(d.Body))
	time.Sleep(time.Hour) // until SIGKILL: no Close, no leave, no commit
	return 0
}

// startHolder runs the hold worker on queue in the group of raw and waits until it
// holds a delivery; it returns the process.
func startHolder(t *testing.T, raw, queue string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+raw+" "+queue)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			line <- s.Text()
		}
		close(line)
	}()
	select {
	case l := <-line:
		if !strings.HasPrefix(l, "held ") {
			t.Fatalf("hold worker: %q", l)
		}
	case <-time.After(time.Minute):
		t.Fatal("the hold worker did not receive a delivery within a minute")
	}
	return cmd
}

// TestKilledWorkerReleasesPartitions: a worker killed with SIGKILL (no Close, no leaving
// the group) holds its partition only until the group's session times out, by default
// 10 s (franz-go's and librdkafka's own default is 45 s); then the record it held is
// delivered to the next member.
func TestKilledWorkerReleasesPartitions(t *testing.T) {
	t.Parallel()
	group := transporttest.UniqueName("bqtest-kill")
	raw := withParams(t, brokerURL(t), "group", group)
	q := newTopic(t, "bqtest-kill")
	createTopic(t, q, 1)
	tr := openKafka(t)
	publishOK(t, tr, &transport.Message{Queue: q, Body: []byte(`{"n":1}`)})
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	holder := startHolder(t, raw, q)
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	killed := time.Now()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr2, err := kafka.Open(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr2.Close(context.Background()) })
	c := consumeOn(t, tr2, q, 1)
	// The bound: the session timeout, plus the time for the surviving member to join and
	// fetch (a few seconds). With franz-go's default session (45 s) this fails.
	limit := kafka.DefaultSessionTimeout + 10*time.Second
	d := transporttest.Receive(t, c, limit)
	took := time.Since(killed)
	if string(d.Body) != `{"n":1}` {
		t.Fatalf("got %q, want the record the killed worker held", d.Body)
	}
	t.Logf("the killed worker's record was delivered again %s after the kill (session timeout %s)", took.Round(100*time.Millisecond), kafka.DefaultSessionTimeout)
	if took > limit {
		t.Errorf("partition released %s after the kill, want within %s", took, limit)
	}
	settleOK(t, c, d, transport.Settlement{Outcome: transport.Ack})
}

// TestClosedWorkerLeavesAtOnce: a worker that closes its consumer leaves the group at
// once, so the next member gets the partition long before the session timeout (set to
// 45 s here to tell the two apart).
func TestClosedWorkerLeavesAtOnce(t *testing.T) {
	t.Parallel()
	const session = 45 * time.Second
	q := newTopic(t, "bqtest-leave")
	createTopic(t, q, 1)
	tr := openKafka(t, "session_timeout", session.String(), "heartbeat_interval", "3s")
	for i := range 2 {
		publishOK(t, tr, &transport.Message{Queue: q, Body: fmt.Appendf(nil, `{"n":%d}`, i)})
	}
	c1, err := tr.Consume(context.Background(), q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := transporttest.Receive(t, c1, 30*time.Second)
	settleOK(t, c1, d, transport.Settlement{Outcome: transport.Ack})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c1.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed := time.Now()
	c2 := consumeOn(t, tr, q, 1)
	limit := session / 3
	d = transporttest.Receive(t, c2, limit)
	took := time.Since(closed)
	if string(d.Body) != `{"n":1}` {
		t.Fatalf("got %q, want the second record", d.Body)
	}
	t.Logf("the next member got the partition %s after Close (session timeout %s)", took.Round(100*time.Millisecond), session)
	settleOK(t, c2, d, transport.Settlement{Outcome: transport.Ack})
}
