package pgstore_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/outbox/pgstore"
	"github.com/babelqueue-go/babelqueue/transport"
)

// Environment of the relay child process (TestRelayChild).
const (
	childBroker = "BQ_OUTBOX_CHILD_BROKER" // the target's name; unset: not a child
	childTable  = "BQ_OUTBOX_CHILD_TABLE"
	childPause  = "BQ_OUTBOX_CHILD_PAUSE" // after this many confirmed batches, stop and wait to be killed
)

const childBatch = 100

// TestRelayChild is not a test of its own: it is the relay process that
// TestRelayKilledMidBatch starts, kills with SIGKILL and starts again. Run without its
// environment it returns at once.
func TestRelayChild(t *testing.T) {
	name := os.Getenv(childBroker)
	if name == "" {
		return
	}
	var tg target
	for _, x := range targets {
		if x.name == name {
			tg = x
		}
	}
	pause := 0
	_, _ = fmt.Sscan(os.Getenv(childPause), &pause)
	store, err := pgstore.New(openDB(t, pgURL(t)), pgstore.WithTable(os.Getenv(childTable)))
	if err != nil {
		t.Fatal(err)
	}
	tr := &announcing{Transport: tg.open(t, nil), pauseAfter: pause, out: os.Stdout}
	relay := outbox.NewRelay(store, tr, outbox.WithBatchSize(childBatch), outbox.WithPollInterval(20*time.Millisecond), outbox.WithLogger(testLogger(t)))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fmt.Fprintln(os.Stdout, "READY")
	if err := relay.Run(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(os.Stdout, "STOPPED")
}

// announcing prints "CONFIRMED <batch> <rows>" once the broker confirmed each batch,
// before the relay can mark it published; after pauseAfter batches it blocks there,
// so a kill lands between the broker's confirm and the commit.
type announcing struct {
	transport.Transport
	pauseAfter int
	out        io.Writer
	n          int
}

func (a *announcing) PublishConfirmed(ctx context.Context, msgs []*transport.Message) error {
	err := transport.PublishConfirmed(ctx, a.Transport, msgs)
	if err != nil {
		return err
	}
	a.n++
	fmt.Fprintf(a.out, "CONFIRMED %d %d\n", a.n, len(msgs))
	if a.n == a.pauseAfter {
		time.Sleep(time.Hour) // until SIGKILL
	}
	return nil
}

// child is a relay process and the lines it prints.
type child struct {
	cmd   *exec.Cmd
	lines chan string
}

func startChild(t *testing.T, tg target, table string, pause int) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayChild$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), childBroker+"="+tg.name, childTable+"="+table, fmt.Sprintf("%s=%d", childPause, pause))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return c
}

// until reads the child's lines until one starts with prefix, and returns every
// CONFIRMED line's row count on the way.
func (c *child) until(t *testing.T, prefix string, timeout time.Duration) (line string, confirmed []int) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("the relay child exited before printing %q", prefix)
			}
			var batch, rows int
			if _, err := fmt.Sscanf(l, "CONFIRMED %d %d", &batch, &rows); err == nil {
				confirmed = append(confirmed, rows)
			}
			if strings.HasPrefix(l, prefix) {
				return l, confirmed
			}
		case <-deadline:
			t.Fatalf("the relay child printed no %q within %s", prefix, timeout)
		}
	}
}

// A relay killed with SIGKILL between the broker's confirm and the commit of its
// batch, then started again: every committed row is on the broker, and exactly the
// batch in flight is there twice.
func TestRelayKilledMidBatch(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		f := newFixture(t, tg)
		ids := f.write(t, 0, 1000)

		first := startChild(t, tg, f.store.Table(), 3)
		_, confirmed := first.until(t, "CONFIRMED 3 ", 60*time.Second)
		if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = first.cmd.Wait()
		inFlight := confirmed[2]
		marked := confirmed[0] + confirmed[1]
		pending, err := f.store.Pending(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(len(ids) - marked); pending != want {
			t.Fatalf("after the kill %d rows pending, want %d (the killed batch of %d, confirmed by the broker, must not be marked)", pending, want, inFlight)
		}

		second := startChild(t, tg, f.store.Table(), 0)
		second.until(t, "READY", 60*time.Second)
		f.waitPending(t, 0, 60*time.Second)
		if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		second.until(t, "STOPPED", 30*time.Second)
		if err := second.cmd.Wait(); err != nil {
			t.Fatalf("the restarted relay did not stop cleanly on SIGTERM: %v", err)
		}

		gots := tg.collect(t, f.queue, len(ids), 2*time.Second, 60*time.Second)
		dups := checkAll(t, gots, ids)
		checkKeyOrder(t, gots)
		t.Logf("%s: %d committed rows all on the broker after a SIGKILL mid-batch; %d duplicates (the batch in flight had %d rows)", tg.name, len(ids), dups, inFlight)
		if dups != inFlight {
			t.Fatalf("%d duplicates, want exactly the %d rows of the batch in flight", dups, inFlight)
		}
	})
}
