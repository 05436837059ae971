package artemis_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/artemis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// proxy forwards loopback TCP connections to the broker and can cut them all at once,
// as a broker restart or a network drop would.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, b)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(b, c); _ = b.Close() }()
		go func() { defer p.wg.Done(); _, _ = io.Copy(c, b); _ = c.Close() }()
	}
}

// cut closes every proxied connection.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// After the connection drops, publishing and consuming go on over a new one; a
// delivery handed out over the lost connection is back on the broker: rewinding it
// succeeds, acknowledging it fails with ErrDeliveryLost, and it is delivered again.
func TestReconnectAfterDrop(t *testing.T) {
	raw := brokerURL(t)
	u, _ := url.Parse(raw)
	p := newProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tr, err := artemis.Open(ctx, u.String(), artemis.WithLogger(quiet()), artemis.WithMaxBackoff(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close(context.Background()) }()
	q := transporttest.UniqueName("bqtest-reconnect")
	pub := func(body string) {
		t.Helper()
		if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(body)}); err != nil {
			t.Fatalf("Publish(%s): %v", body, err)
		}
	}
	pub(`{"n":1}`)
	pub(`{"n":2}`)
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	first := transporttest.Receive(t, c, 30*time.Second)

	p.cut()

	// Publishing goes on over a new connection.
	pub(`{"n":3}`)
	// The delivery taken before the drop cannot be acknowledged any more…
	err = c.Settle(ctx, first, transport.Settlement{Outcome: transport.Ack})
	if !errors.Is(err, artemis.ErrDeliveryLost) || !errors.Is(err, transport.ErrTakenBack) || !errors.Is(err, transport.ErrAlreadySettled) {
		t.Fatalf("Ack of a delivery from the lost connection = %v, want ErrDeliveryLost, ErrTakenBack and ErrAlreadySettled", err)
	}
	// …and it is finished: the broker already has it back, so the runtime does not
	// rewind it and a Rewind is refused as a second settle.
	if err := c.Settle(ctx, first, transport.Settlement{Outcome: transport.Rewind}); !errors.Is(err, transport.ErrAlreadySettled) {
		t.Fatalf("Rewind of a delivery taken back with the lost connection = %v, want ErrAlreadySettled", err)
	}
	// The consumer attaches again and every message arrives, the first one included.
	seen := map[string]bool{}
	for len(seen) < 3 {
		d := transporttest.Receive(t, c, 30*time.Second)
		seen[string(d.Body)] = true
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatalf("Ack after reconnecting: %v", err)
		}
	}
	for _, want := range []string{`{"n":1}`, `{"n":2}`, `{"n":3}`} {
		if !seen[want] {
			t.Errorf("after the drop %s was never delivered (got %v)", want, seen)
		}
	}
	transporttest.ExpectNothing(t, c, time.Second)
}

// A receive that waits through a drop resumes on the new connection.
func TestReceiveWaitsThroughDrop(t *testing.T) {
	raw := brokerURL(t)
	u, _ := url.Parse(raw)
	p := newProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tr, err := artemis.Open(ctx, u.String(), artemis.WithLogger(quiet()), artemis.WithMaxBackoff(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close(context.Background()) }()
	q := transporttest.UniqueName("bqtest-waitdrop")
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	got := make(chan *transport.Delivery, 1)
	go func() {
		d, err := c.Receive(ctx)
		if err != nil {
			t.Errorf("Receive through a drop: %v", err)
		}
		got <- d
	}()
	time.Sleep(200 * time.Millisecond)
	p.cut()
	other := openTransport(t)
	if err := other.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"after":"drop"}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		if d == nil || string(d.Body) != `{"after":"drop"}` {
			t.Fatalf("got %v", d)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the waiting Receive never resumed after the drop")
	}
}
