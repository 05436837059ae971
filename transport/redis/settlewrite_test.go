package redis_test

import (
	"errors"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// A settle write Redis refuses (the dead-letter key holds a string: WRONGTYPE) changes
// nothing: the settle fails with a settle-write error, the reservation is still ours, a
// rewind gives the message back, and nothing was written. Found by the fault suite
// (faults, issue 16): the script used to remove the reservation before the write
// failed, and Redis does not undo a script's earlier commands, so the message was lost.
func TestRefusedSettleWriteChangesNothing(t *testing.T) {
	ctx := ctxT(t)
	c := client(t)
	q := transporttest.UniqueName("bqtest-wrongtype")
	cleanKeys(t, c, q+"*")
	tr, err := transport.Open(ctx, brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctx)
	body := envelope("1")
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body}); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, q+".dlq", "not a list", 0).Err(); err != nil {
		t.Fatal(err)
	}
	cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close(ctx)
	d, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: q + ".dlq", Body: body}}})
	if !errors.Is(err, transport.ErrSettleWrite) {
		t.Fatalf("settle with a refused write = %v, want a settle-write error", err)
	}
	if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatalf("rewind after the refused write: %v (the reservation was lost)", err)
	}
	d2, err := cons.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(d2.Body) != string(body) {
		t.Fatalf("received %q after the rewind, want the message back", d2.Body)
	}
	if err := cons.Settle(ctx, d2, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Get(ctx, q+".dlq").Result(); v != "not a list" {
		t.Errorf("the dead-letter key holds %q, want it untouched", v)
	}
}
