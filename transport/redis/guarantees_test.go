package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/transport"
	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func envelope(n string) []byte {
	return []byte(`{"job":"urn:babel:test:redis","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"n":"` + n + `"},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"q","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`)
}

// newClient returns a fresh go-redis client on the test Redis (not shared, so a test can
// close it to play a crashed worker).
func newClient(t testing.TB) *goredis.Client {
	t.Helper()
	opts, err := goredis.ParseURL(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return goredis.NewClient(opts)
}

// TestCrashedWorkerIsRedelivered plays a worker that dies mid-handler: it reserves a
// message and its connection goes away without a settle. After retry_after another
// worker gets the message, and a late settle from the first reservation touches nothing.
func TestCrashedWorkerIsRedelivered(t *testing.T) {
	for _, layout := range []struct {
		name string
		opts []bqredis.Option
	}{
		{"default", nil},
		{"laravel", []bqredis.Option{bqredis.WithLaravel("bqtest:")}},
	} {
		t.Run(layout.name, func(t *testing.T) {
			ctx := ctxT(t)
			admin := client(t)
			q := transporttest.UniqueName("bqtest")
			cleanKeys(t, admin, "*"+q+"*")
			opts := append([]bqredis.Option{bqredis.WithRetryAfter(time.Second)}, layout.opts...)

			// Worker A: reserves, then its process "dies" (the connection closes).
			ca := newClient(t)
			a := newTransport(t, ca, opts...)
			body := envelope("crash")
			if err := a.Publish(ctx, &transport.Message{Queue: q, Body: body}); err != nil {
				t.Fatal(err)
			}
			consA, err := a.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			dA := transporttest.Receive(t, consA, 10*time.Second)
			if !bytes.Equal(dA.Body, body) {
				t.Fatalf("A got %q", dA.Body)
			}
			_ = ca.Close()

			// Worker B sees nothing at first, then the recovered message.
			b := newTransport(t, client(t), opts...)
			consB, err := b.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer consB.Close(ctx)
			dB := transporttest.Receive(t, consB, 15*time.Second)
			if layout.name == "laravel" {
				// Laravel migrates the reserved copy, whose attempts is one higher: a
				// recovered reservation counts as an attempt there.
				if !bytes.Contains(dB.Body, []byte(`"attempts":1`)) {
					t.Fatalf("B got %q, want the reserved copy with attempts 1", dB.Body)
				}
			} else if !bytes.Equal(dB.Body, body) {
				t.Fatalf("B got %q, want %q", dB.Body, body)
			}

			// A comes back from the dead (a new connection, the old delivery) and settles
			// late: the gate refuses, and B's reservation is untouched.
			a2 := newTransport(t, client(t), opts...)
			consA2, err := a2.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer consA2.Close(ctx)
			staleCons, stale, err := bqredis.RehomeForTest(consA2, dA)
			if err != nil {
				t.Fatal(err)
			}
			err = staleCons.Settle(ctx, stale, transport.Settlement{Outcome: transport.Ack,
				Writes: []*transport.Message{{Queue: q + ".dlq", Body: []byte(`{"x":1}`)}}})
			if !errors.Is(err, bqredis.ErrReservationLost) || !errors.Is(err, transport.ErrTakenBack) || !errors.Is(err, transport.ErrAlreadySettled) {
				t.Fatalf("late settle = %v, want ErrReservationLost, ErrTakenBack and ErrAlreadySettled", err)
			}
			if n := admin.Exists(ctx, q+".dlq", "bqtest:"+q+".dlq").Val(); n != 0 {
				t.Fatalf("a refused late settle still wrote its dead-letter message")
			}
			if err := consB.Settle(ctx, dB, transport.Settlement{Outcome: transport.Ack}); err != nil {
				t.Fatalf("B's ack after the stale settle: %v", err)
			}
			transporttest.ExpectNothing(t, consB, 1500*time.Millisecond)
		})
	}
}

// redisServer starts a private redis-server with an append-only file on a free loopback
// port, so restarting it disturbs no one else. It returns the port and a restart
// function that kills the server (SIGKILL) and starts it again on the same data.
func redisServer(t *testing.T) (addr string, restart func()) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		brokerproc.Require(t, "redis-server not installed")
	}
	port := brokerproc.FreePort(t)
	dir := t.TempDir()
	p := brokerproc.New(t, brokerproc.Config{
		Name: "private redis-server",
		Command: func() *exec.Cmd {
			return exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
				"--appendonly", "yes", "--appendfsync", "always", "--dir", dir)
		},
		Log:          filepath.Join(dir, "redis.log"),
		Port:         port,
		DialTimeout:  200 * time.Millisecond,
		StartTimeout: 10 * time.Second,
		Poll:         50 * time.Millisecond,
		Awaiting:     "start",
		Signal:       syscall.SIGKILL,
	})
	start := func() {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
	}
	start()
	return fmt.Sprintf("127.0.0.1:%d", port), func() { p.Stop(); start() }
}

// TestRedisRestartMidRun kills Redis while workers run and starts it again: every
// message is handled, none is lost, and nothing stays reserved; with synchronous and with
// deferred acks.
func TestRedisRestartMidRun(t *testing.T) {
	brokerURL(t) // the same gate as every integration test
	for _, mode := range []struct{ name, query string }{
		{"sync-acks", ""},
		{"deferred-acks", "&deferred_acks=2ms"},
	} {
		t.Run(mode.name, func(t *testing.T) { restartMidRun(t, mode.query) })
	}
}

func restartMidRun(t *testing.T, query string) {
	addr, restart := redisServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	raw := "redis://" + addr + "/0?retry_after=2" + query
	tr, err := transport.Open(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	const n = 60
	q := "restart"
	for i := range n {
		if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: envelope(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	defer admin.Close()
	var (
		mu      sync.Mutex
		handled = map[string]int{}
		wg      sync.WaitGroup
	)
	restarted := make(chan struct{})
	var once sync.Once
	runCtx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				d, err := cons.Receive(runCtx)
				if err != nil {
					if runCtx.Err() != nil {
						return
					}
					continue
				}
				mu.Lock()
				handled[string(d.Body)]++
				count := len(handled)
				mu.Unlock()
				if count >= n/3 {
					once.Do(func() {
						restart()
						close(restarted)
					})
				}
				if err := cons.Settle(runCtx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
					// Redis is down: give it back if we can; else its reservation
					// lapses and the sweep returns it.
					_ = cons.Settle(runCtx, d, transport.Settlement{Outcome: transport.Rewind})
				}
			}
		}()
	}
	// Stop the workers once every message was handled and Redis holds none of them.
	go func() {
		for runCtx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			mu.Lock()
			all := len(handled) == n
			mu.Unlock()
			if all && admin.Exists(runCtx, q, q+":processing", q+":processing:deadlines").Val() == 0 {
				stopWorkers()
			}
		}
	}()
	wg.Wait()
	select {
	case <-restarted:
	default:
		t.Fatal("the test never restarted Redis")
	}
	if len(handled) != n {
		t.Fatalf("handled %d distinct messages of %d after a Redis restart", len(handled), n)
	}
	for _, k := range []string{q, q + ":processing", q + ":processing:deadlines"} {
		if l := admin.Exists(context.Background(), k).Val(); l != 0 {
			t.Errorf("key %s still exists after every message was acked", k)
		}
	}
}
