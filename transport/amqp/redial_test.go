package amqp

import (
	"context"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// The network stays silent well past the heartbeat's 4.5 s (10 s), so the reconnection
// that a Publish waiting for a connection starts dials into it: that handshake is given
// up after firstRedialTimeout, not the connect timeout, and a later one, after the
// heal, carries the Publish and resumes the consumer within issue 38's bound of 10 s of
// the heal (2 s more for a loaded machine). With the
// connect timeout (30 s) the fault suite's consumers resumed 34.7 s after the freeze.
func TestConsumerResumesAfterLongSilence(t *testing.T) {
	tr, p, _ := proxied(t, "")
	q := newQueue(t)
	ctx := ctxT(t)
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	t.Cleanup(p.Thaw)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":0}`)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Settle(ctx, receive(t, c, 30*time.Second), transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}

	p.Freeze()
	frozen := time.Now()
	time.Sleep(5 * time.Second) // the connection is found dead (4.5 s)
	published := make(chan error, 1)
	go func() { // its wait for a connection dials into the silence
		published <- tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":1}`)})
	}()
	time.Sleep(5 * time.Second)
	p.Strand() // new connections pass; those open (the redial's among them) stay silent
	healed := time.Now()
	if err := <-published; err != nil {
		t.Fatalf("the Publish made during the silence: %v", err)
	}
	for {
		d := receive(t, c, time.Minute)
		if err := c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
		if string(d.Body) == `{"n":1}` {
			break
		}
		// {"n":0} again: its ack was caught by the freeze (at-least-once).
	}
	took := time.Since(healed)
	t.Logf("the consumer settled on a new connection %s after the heal (%s after the freeze)", took.Round(100*time.Millisecond), time.Since(frozen).Round(100*time.Millisecond))
	if limit := 10*time.Second + 2*time.Second; took > limit {
		t.Errorf("the consumer settled again %s after the heal, past %s", took.Round(100*time.Millisecond), limit)
	}
}
