package artemis_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/artemis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// A dead connection (kept open, nothing through it either way, as behind a network that
// drops packets) is found within the AMQP idle timeout, artemis.DefaultIdleTimeout by
// default, by a consumer waiting for a message and by a Publish waiting for its
// outcome, and logged when it is found, not when the transport is next used: both
// within issue 38's bound of 10 s. Once the network heals, the Publish that was
// waiting goes through on a new connection and the consumer receives it: nothing is
// lost. Before, go-amqp's default idle timeout of a minute left both waiting that long,
// and then the publisher's loss was logged only once its reconnection, dialling into
// the dead network with the transport's lock held, gave up (14.8 s after the freeze).
func TestDeadConnectionFound(t *testing.T) {
	p, proxied := faultproxy.StartURL(t, brokerURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The consumer and the publisher each on a connection of its own (a transport
	// keeps one), so each finds its dead connection by itself.
	open := func() (*artemis.Transport, *transporttest.LogBuffer) {
		logs := &transporttest.LogBuffer{}
		tr, err := artemis.Open(ctx, proxied, artemis.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer ccancel()
			_ = tr.Close(cctx)
		})
		return tr, logs
	}
	sub, subLogs := open()
	pub, pubLogs := open()
	t.Cleanup(p.Thaw) // before the transports close, when the test fails frozen
	q := transporttest.UniqueName("bqtest-dead")
	c, err := sub.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Both connections carry traffic before the freeze.
	if err := pub.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":0}`)}); err != nil {
		t.Fatal(err)
	}
	if d := transporttest.Receive(t, c, 30*time.Second); string(d.Body) != `{"n":0}` {
		t.Fatalf("got %s before the freeze", d.Body)
	} else if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	received := make(chan *transport.Delivery, 8)
	go func() {
		for {
			d, err := c.Receive(ctx)
			if err != nil {
				return
			}
			received <- d
		}
	}()
	time.Sleep(200 * time.Millisecond) // the Receive is waiting on the live link

	p.Freeze()
	frozen := time.Now()
	published := make(chan error, 1)
	go func() { published <- pub.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":1}`)}) }()

	// Each connection is found dead, and said so, within issue 38's bound (the idle
	// timeout, 5 s, and the rest for a loaded machine); without the idle timeout it took
	// a minute, and the publisher's log 14.8 s.
	const limit = 10 * time.Second
	found := func(who string, logs *transporttest.LogBuffer) {
		t.Helper()
		for !strings.Contains(logs.String(), "artemis: connection lost") {
			if time.Since(frozen) > limit {
				t.Fatalf("the %s's dead connection was not found within %s (logs: %q)", who, limit, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("the %s found its dead connection %s after the freeze", who, time.Since(frozen).Round(100*time.Millisecond))
		if line := logs.String(); !strings.Contains(line, "i/o timeout") {
			t.Errorf("the %s's log does not say the connection timed out: %q", who, line)
		}
	}
	found("consumer", subLogs)
	found("publisher", pubLogs)

	p.Thaw()
	select {
	case err := <-published:
		if err != nil {
			t.Fatalf("the Publish waiting through the dead connection = %v, want nil once the network healed", err)
		}
		t.Logf("the Publish returned %s after the freeze", time.Since(frozen).Round(100*time.Millisecond))
	case <-ctx.Done():
		t.Fatal("the Publish never returned")
	}
	select {
	case d := <-received:
		if string(d.Body) != `{"n":1}` {
			t.Fatalf("after the freeze the consumer got %s, want {\"n\":1}", d.Body)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
		t.Logf("the consumer received it %s after the freeze", time.Since(frozen).Round(100*time.Millisecond))
	case <-ctx.Done():
		t.Fatal("the consumer never received the message published through the dead connection")
	}
}

// Close returns within its context while a reconnection is dialling into a network
// that swallows everything (Artemis answers no handshake through it): the dial, which
// holds the transport, is abandoned, and the Publish that was waiting on it fails
// with ErrClosed. Before, Close waited for the dial to give up (10 s here, when
// Artemis dropped the silent handshake; ConnectTimeout, 15 s, on a real black hole),
// past a shutdown grace shorter than that (issue 38: SIGTERM within the grace).
func TestCloseAbandonsRedialIntoDeadNetwork(t *testing.T) {
	p, proxied := faultproxy.StartURL(t, brokerURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logs := &transporttest.LogBuffer{}
	tr, err := artemis.Open(ctx, proxied, artemis.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	q := transporttest.UniqueName("bqtest-closedial")
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":0}`)}); err != nil {
		t.Fatal(err)
	}
	p.Freeze()
	t.Cleanup(p.Thaw)
	published := make(chan error, 1)
	go func() { published <- tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":1}`)}) }()
	for !strings.Contains(logs.String(), "artemis: connection lost") {
		if ctx.Err() != nil {
			t.Fatalf("the dead connection was never found: %q", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the Publish is dialling again, into the freeze

	cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
	defer ccancel()
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- tr.Close(cctx) }()
	select {
	case <-closed:
		t.Logf("Close returned %s after it was called", time.Since(start).Round(10*time.Millisecond))
	case <-time.After(5 * time.Second): // Close's context (2 s) and a slack
		t.Fatal("Close did not return within its context: the reconnection under way held it")
	}
	select {
	case err := <-published:
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("the Publish waiting for the reconnection = %v, want an error matching ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the Publish waiting for the reconnection did not return once the transport closed")
	}
}
