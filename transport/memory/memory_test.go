package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestKit runs every group of the behavioural kit that memory:// supports.
func TestKit(t *testing.T) {
	transporttest.RunAll(t, transporttest.Harness{
		Config: transporttest.Config{
			Open:               func(*testing.T) transport.Transport { return memory.New() },
			NativeRedeliveries: true,
			QuietPeriod:        100 * time.Millisecond,
			BreakSettleWrites: func(_ *testing.T, tr transport.Transport) func() {
				m := tr.(*memory.Transport)
				m.FailWrites(func(*transport.Message) error { return errors.New("memory: the test refuses every write") })
				return func() { m.FailWrites(nil) }
			},
		},
		Broker: "memory",
		Stats:  transporttest.StatsOptions{Oldest: transporttest.OldestCreatedAt},
		OpenWithLimit: func(_ *testing.T, limit int) transport.Transport {
			return memory.New(memory.WithMaxMessageSize(limit))
		},
		Without: map[transporttest.Case]string{
			transporttest.CasePipelined: "memory's Settle makes its writes before it returns: nothing is pipelined",
		},
	})
}

func TestOpenByURL(t *testing.T) {
	ctx := context.Background()
	tr, err := transport.Open(ctx, "memory://")
	if err != nil {
		t.Fatalf("Open(memory://): %v", err)
	}
	defer tr.Close(ctx)
	if _, err := transport.Open(ctx, "memory://?flavour=x"); !errors.Is(err, transport.ErrBadURL) {
		t.Errorf("unknown parameter: got %v, want ErrBadURL", err)
	}
}

func TestFailedSettleWriteAcksNothing(t *testing.T) {
	ctx := context.Background()
	tr := memory.New()
	if err := tr.Publish(ctx, &transport.Message{Queue: "q", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	c, _ := tr.Consume(ctx, "q", transport.ConsumeOptions{})
	d, _ := c.Receive(ctx)
	boom := errors.New("broker said no")
	tr.FailWrites(func(m *transport.Message) error {
		if m.Queue == "q.dlq" {
			return boom
		}
		return nil
	})
	err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{
		{Queue: "other", Body: []byte(`1`)}, {Queue: "q.dlq", Body: []byte(`2`)},
	}})
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.Is(err, boom) {
		t.Fatalf("Settle with a failing write = %v, want ErrSettleWrite wrapping the broker error", err)
	}
	if n := tr.InFlight("q"); n != 1 {
		t.Fatalf("in flight after a failed settle = %d, want 1 (not acknowledged)", n)
	}
	if got := tr.Messages("other"); len(got) != 0 {
		t.Fatalf("a failed settlement wrote %d messages to another queue, want none", len(got))
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatal(err)
	}
	d, _ = c.Receive(ctx)
	if d.Redeliveries != 1 {
		t.Errorf("Redeliveries after rewind = %d, want 1", d.Redeliveries)
	}
}
