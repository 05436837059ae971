package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// A consumer whose connections go silent for good (kept open, no byte through, as
// behind a middlebox that forgot them) while new connections pass finds them dead,
// drops them and resumes on new ones: a record published after the freeze is received
// within 10 s of it (issue 38's bound; a little slack for a loaded machine). Its
// heartbeats, commits and fetches fail after kafka.DefaultRequestTimeoutOverhead; with
// franz-go's own 10 s the fault suite's consumers took 23 s and lost their session.
func TestSilentConnectionFound(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	q := newTopic(t, "bqtest-silent")
	createTopic(t, q, 1)
	p, err := faultproxy.New(seeds(t)[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	pub := rawClient(t) // the publisher is not behind the proxy
	tr, err := kafka.New(pub, kafka.Factory(kgo.SeedBrokers(seeds(t)...), kgo.Dialer(p.DialContext)),
		kafka.WithGroup(transporttest.UniqueName("bqtest-silent")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := consumeOn(t, tr, q, 4)
	publishOK(t, tr, &transport.Message{Queue: q, Body: []byte(`{"n":0}`)})
	if d := transporttest.Receive(t, c, 60*time.Second); string(d.Body) != `{"n":0}` {
		t.Fatalf("got %s before the freeze", d.Body)
	} else if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}

	p.Freeze()
	frozen := time.Now()
	time.Sleep(time.Second)
	p.Strand() // new connections pass; the ones open stay silent for good
	publishOK(t, tr, &transport.Message{Queue: q, Body: []byte(`{"n":1}`)})
	const limit = 10*time.Second + 5*time.Second
	d := transporttest.Receive(t, c, limit)
	took := time.Since(frozen)
	if string(d.Body) != `{"n":1}` {
		t.Fatalf("after the freeze the consumer got %s, want {\"n\":1}", d.Body)
	}
	if took > limit {
		t.Fatalf("the consumer resumed %s after its connections went silent, past %s", took.Round(100*time.Millisecond), limit)
	}
	t.Logf("the consumer resumed on new connections %s after the freeze", took.Round(100*time.Millisecond))
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
}
