package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/transport"
)

// Issue 38. The faults come from a loopback proxy between the transport and the shared
// RabbitMQ (internal/faultproxy): Down cuts every connection and refuses new ones, as a
// broker that went away; Freeze keeps them open and passes no byte, as a network that
// drops packets (a black hole).

// proxied opens a transport through a fresh proxy to the test broker. The transport
// logs to the test log and to the returned recorder.
func proxied(t *testing.T, query string, opts ...Option) (*Transport, *faultproxy.Proxy, *recorder) {
	t.Helper()
	p, proxied := faultproxy.StartURL(t, brokerURL(t))
	u, err := url.Parse(proxied)
	if err != nil {
		t.Fatal(err)
	}
	u.RawQuery = query
	rec := &recorder{next: testLogger(t).Handler(), seen: &seen{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := Dial(ctx, u.String(), append([]Option{WithLogger(slog.New(rec))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr, p, rec
}

// recorder is a slog handler that keeps the lines it saw (message and attributes) and
// passes them on.
type recorder struct {
	next slog.Handler
	seen *seen
}

type seen struct {
	mu    sync.Mutex
	lines []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &recorder{next: r.next.WithAttrs(as), seen: r.seen}
}
func (r *recorder) WithGroup(name string) slog.Handler {
	return &recorder{next: r.next.WithGroup(name), seen: r.seen}
}
func (r *recorder) Handle(ctx context.Context, rec slog.Record) error {
	line := rec.Message
	rec.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	r.seen.mu.Lock()
	r.seen.lines = append(r.seen.lines, line)
	r.seen.mu.Unlock()
	return r.next.Handle(ctx, rec)
}

// waitFor returns once a line holding every one of parts was logged; it fails the test
// when none was within the time given.
func (r *recorder) waitFor(t *testing.T, within time.Duration, parts ...string) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		r.seen.mu.Lock()
		lines := r.seen.lines
		r.seen.mu.Unlock()
		for _, l := range lines {
			found := true
			for _, p := range parts {
				found = found && strings.Contains(l, p)
			}
			if found {
				return
			}
		}
	}
	t.Fatalf("no log line with %q within %s", parts, within)
}

// onQueue drains q with a plain connection and counts each body.
func onQueue(t *testing.T, q string) map[string]int {
	t.Helper()
	ch := rawChannel(t, rawConn(t))
	got := map[string]int{}
	for {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatalf("get %s: %v", q, err)
		}
		if !ok {
			return got
		}
		got[string(d.Body)]++
	}
}

// TestPublishRidesOutOutages: publishers looping over Publish through a 5 s cut, a 3 s
// black hole (shorter than the 4.5 s the heartbeat takes to find the connection dead)
// and a 12 s one (longer) wait for the connection instead of failing. Every Publish that
// returned nil is on the queue afterwards, no message is there twice (the wait never
// sends a write again that the broker may have), and the only errors are writes whose
// fate the fault made unknown, a confirm lost or a write that failed on the way
// (transport.ErrNotConfirmed): at most one per publisher and fault, the one in flight
// when the connection died.
func TestPublishRidesOutOutages(t *testing.T) {
	for _, fault := range []struct {
		name         string
		down         time.Duration
		break_, heal func(p *faultproxy.Proxy)
	}{
		{"cut 5s", 5 * time.Second, (*faultproxy.Proxy).Down, (*faultproxy.Proxy).Up},
		{"black hole 3s", 3 * time.Second, (*faultproxy.Proxy).Freeze, (*faultproxy.Proxy).Thaw},
		{"black hole 12s", 12 * time.Second, (*faultproxy.Proxy).Freeze, (*faultproxy.Proxy).Thaw},
	} {
		t.Run(fault.name, func(t *testing.T) {
			tr, p, rec := proxied(t, "")
			q := newQueue(t)
			const publishers = 3
			var (
				mu       sync.Mutex
				returned []string // bodies whose Publish returned nil
				lost     int      // Publish errors matching ErrNotConfirmed: fate unknown
				wg       sync.WaitGroup
			)
			stop := make(chan struct{})
			for w := range publishers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						body := fmt.Sprintf(`{"publisher":%d,"n":%d}`, w, i)
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(body)})
						cancel()
						mu.Lock()
						switch {
						case err == nil:
							returned = append(returned, body)
						case errors.Is(err, transport.ErrNotConfirmed):
							lost++
							t.Logf("publisher %d: %v", w, err)
						default:
							t.Errorf("publisher %d: Publish during the fault: %v", w, err)
						}
						mu.Unlock()
						time.Sleep(5 * time.Millisecond)
					}
				}()
			}
			count := func() int {
				mu.Lock()
				defer mu.Unlock()
				return len(returned)
			}
			time.Sleep(time.Second)
			before := count()
			fault.break_(p)
			time.Sleep(fault.down)
			during := count() - before
			fault.heal(p)
			healed := count()
			for deadline := time.Now().Add(30 * time.Second); count() < healed+3*publishers; {
				if time.Now().After(deadline) {
					t.Fatalf("publishers did not resume after the fault: %d publishes since", count()-healed)
				}
				time.Sleep(20 * time.Millisecond)
			}
			close(stop)
			wg.Wait()

			got := onQueue(t, q)
			missing := 0
			for _, b := range returned {
				if got[b] == 0 {
					missing++
				}
			}
			twice := 0
			for _, n := range got {
				if n > 1 {
					twice++
				}
			}
			t.Logf("%s: %d publishes returned nil (%d of them completed during the fault), %d of unknown fate, %d on the queue",
				fault.name, len(returned), during, lost, len(got))
			if missing > 0 {
				t.Errorf("%d publishes that returned nil are not on the queue", missing)
			}
			if twice > 0 {
				t.Errorf("%d messages are on the queue twice", twice)
			}
			if lost > publishers {
				t.Errorf("%d publishes of unknown fate; at most one per publisher (%d) was in flight when the connection died", lost, publishers)
			}
			if fault.down > 10*time.Second {
				rec.waitFor(t, time.Second, "amqp: connection lost", "no frame from the broker")
			}
		})
	}
}

// TestPublishWaitIsBounded: with the broker gone for good, Publish fails once its
// context ends with context.DeadlineExceeded wrapped with the broker's last error (the
// failed dial), and once the publish wait ends likewise, naming publish_wait; with a
// publish wait of zero it fails at once.
func TestPublishWaitIsBounded(t *testing.T) {
	tr, p, rec := proxied(t, "publish_wait=2s")
	q := newQueue(t)
	m := &transport.Message{Queue: q, Body: []byte(`{"n":1}`)}
	if err := tr.Publish(ctxT(t), m); err != nil {
		t.Fatal(err)
	}
	p.Down()
	rec.waitFor(t, 10*time.Second, "amqp: connection lost") // no publish in flight on the dying connection

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := tr.Publish(ctx, m)
	t.Logf("context ended: %v", err)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "the broker's last error") {
		t.Errorf("Publish whose context ended while the broker was gone = %v, want context.DeadlineExceeded with the broker's last error", err)
	}
	// The broker's last error is the refused dial (the proxy stops listening while down).
	var dial *net.OpError
	if !errors.As(err, &dial) {
		t.Errorf("Publish error %v does not wrap the broker's last error (the failed dial)", err)
	}

	err = tr.Publish(ctxT(t), m)
	t.Logf("publish wait ended: %v", err)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "publish_wait") || !errors.As(err, &dial) {
		t.Errorf("Publish past the publish wait = %v, want context.DeadlineExceeded naming publish_wait, with the broker's error", err)
	}
	var be *transport.BatchError
	if err := tr.PublishConfirmed(ctxT(t), []*transport.Message{m}); !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &be) {
		t.Errorf("PublishConfirmed past the publish wait = %v, want context.DeadlineExceeded (nothing was sent)", err)
	}

	now, pNow, recNow := proxied(t, "publish_wait=0")
	pNow.Down()
	recNow.waitFor(t, 10*time.Second, "amqp: connection lost")
	done := make(chan error, 1)
	go func() { done <- now.Publish(ctxT(t), m) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "publish_wait") {
			t.Errorf("Publish with publish_wait=0 and the broker gone = %v, want context.DeadlineExceeded naming publish_wait", err)
		}
	case <-time.After(20 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("Publish with publish_wait=0 waited for the broker")
	}
}

// TestDeadConnectionFoundByHeartbeat: a black hole that never heals (the connection
// stays open, no byte passes) is found within the default bound, 1.5 heartbeats of 3 s,
// and logged with its cause when it happens. The consumer's held delivery is then
// reported lost, and a Publish in flight fails with its confirm lost instead of waiting
// for the 30 s confirm timeout.
func TestDeadConnectionFoundByHeartbeat(t *testing.T) {
	tr, p, rec := proxied(t, "")
	q := newQueue(t)
	ctx := ctxT(t)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	d := receive(t, c, 30*time.Second)

	p.Freeze()
	frozen := time.Now()
	published := make(chan error, 1)
	go func() { published <- tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":2}`)}) }()
	rec.waitFor(t, 10*time.Second, "amqp: connection lost", "no frame from the broker for 4.5s")
	t.Logf("the dead connection was found and logged %s after the black hole began (bound 4.5 s)", time.Since(frozen).Round(time.Millisecond))
	select {
	case err := <-published:
		if !errors.Is(err, transport.ErrNotConfirmed) {
			t.Errorf("Publish in flight when the connection died = %v, want an error matching ErrNotConfirmed", err)
		}
	case <-time.After(5 * time.Second): // a hang guard, not a timing assertion
		t.Error("Publish in flight did not fail once the connection was found dead")
	}
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack})
	if !errors.Is(err, ErrDeliveryLost) {
		t.Errorf("Ack of a delivery held across the dead connection = %v, want ErrDeliveryLost", err)
	}
}

// A consumer whose connection goes silent for good (kept open, no byte through, as
// behind a middlebox that forgot it) while new connections pass finds it dead within
// 1.5 heartbeats (4.5 s by default), logs it, dials a new connection and consumes
// again. A message published after the freeze goes to the dead consumer first (the
// broker does not know yet): RabbitMQ gives it back once it finds the connection dead
// on its side, about three heartbeats after the last frame, and the consumer receives
// it on its new connection. Issue 38's bound is 10 s; the 2 s over it here are for a
// loaded machine (measured 8.9 s). With the old 5 s heartbeat that took 15 s.
func TestConsumerResumesAfterSilentConnection(t *testing.T) {
	tr, p, rec := proxied(t, "")
	pub := openT(t) // the publisher is not behind the proxy
	q := newQueue(t)
	ctx := ctxT(t)
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := pub.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":0}`)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Settle(ctx, receive(t, c, 30*time.Second), transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}

	p.Freeze()
	frozen := time.Now()
	time.Sleep(time.Second)
	p.Strand() // new connections pass; the one open stays silent for good
	if err := pub.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	const limit = 10*time.Second + 2*time.Second
	d := receive(t, c, 30*time.Second)
	if string(d.Body) == `{"n":0}` {
		// The ack of {"n":0} was still on its way when the connection froze: the broker
		// gives the message back, as at-least-once allows. It must come marked so.
		if d.Redeliveries == 0 {
			t.Fatalf("{\"n\":0} came again after the freeze without being marked redelivered")
		}
		t.Log(`{"n":0} came back: its ack had not reached the broker before the freeze`)
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
		d = receive(t, c, 30*time.Second)
	}
	if string(d.Body) != `{"n":1}` {
		t.Fatalf("after the freeze the consumer got %s, want {\"n\":1}", d.Body)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(frozen)
	t.Logf("the consumer settled on a new connection %s after the freeze", took.Round(100*time.Millisecond))
	if took > limit {
		t.Errorf("the consumer settled again %s after its connection went silent, past %s", took.Round(100*time.Millisecond), limit)
	}
	rec.waitFor(t, time.Second, "amqp: connection lost", "no frame from the broker for 4.5s")
}

// The URL and option forms of the publish wait: a duration, zero allowed, negative
// refused as an invalid option naming it.
func TestPublishWaitOption(t *testing.T) {
	u, _ := url.Parse("amqp://guest:guest@127.0.0.1:5672/?publish_wait=1500ms")
	s := defaultSettings()
	if _, err := parseURL(u, &s); err != nil || s.publishWait != 1500*time.Millisecond {
		t.Errorf("publish_wait=1500ms: %v, %s", err, s.publishWait)
	}
	if s := defaultSettings(); s.publishWait != DefaultPublishWait || s.heartbeat != DefaultHeartbeat {
		t.Errorf("defaults: publish wait %s, heartbeat %s", s.publishWait, s.heartbeat)
	}
	for _, raw := range []string{"amqp://h/?publish_wait=-1s", "amqp://h/?publish_wait=soon"} {
		u, _ := url.Parse(raw)
		s := defaultSettings()
		if _, err := parseURL(u, &s); !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "publish_wait") {
			t.Errorf("%s: %v, want an invalid option naming publish_wait", raw, err)
		}
	}
	_, err := Dial(context.Background(), "amqp://guest:guest@127.0.0.1:1/", WithPublishWait(-time.Second))
	if !errors.Is(err, transport.ErrInvalidOption) || !strings.Contains(err.Error(), "WithPublishWait") {
		t.Errorf("WithPublishWait(-1s): %v, want an invalid option naming it", err)
	}
}
