package artemis

import (
	"context"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// The duplicate id is the transport's own: a header of that name (a redriven message's,
// read from the broker) is never sent on, and one read from the broker never reaches
// the handler.
func TestDuplicateIDIsNeverAHeader(t *testing.T) {
	msg := toAMQP(&transport.Message{Queue: "q", Body: []byte(`{}`), Headers: map[string]string{propDuplicateID: "first-publish", "h": "v"}})
	if v, ok := msg.ApplicationProperties[propDuplicateID]; ok {
		t.Errorf("toAMQP sent the header %s=%v on", propDuplicateID, v)
	}
	if msg.ApplicationProperties["h"] != "v" {
		t.Errorf("toAMQP lost the header h: %v", msg.ApplicationProperties)
	}
	d := fromAMQP("q", &amqp.Message{Value: `{}`, ApplicationProperties: map[string]any{propDuplicateID: "bq-x-1", "h": "v"}})
	if _, ok := d.Headers[propDuplicateID]; ok || d.Headers["h"] != "v" {
		t.Errorf("headers = %v, want h alone", d.Headers)
	}
	tr := &Transport{dupPrefix: "bq-p-"}
	if a, b := tr.duplicateID(), tr.duplicateID(); a == b {
		t.Errorf("two writes got one duplicate id %q", a)
	}
}

// A write sent again with its duplicate id, as write does when the link dropped while
// the outcome was on its way, is stored once, and both sends are accepted; a write with
// another id (a retry or a redrive of the same envelope) is stored again.
func TestResentWriteIsStoredOnce(t *testing.T) {
	raw := transporttest.BrokerURL(t, "BQ_ARTEMIS_URL", "artemis")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := Open(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Close(context.Background()) }()
	q := transporttest.UniqueName("bqtest-dupl")
	m := &transport.Message{Queue: q, Body: []byte(`{"job":"urn:babel:dupl","data":{}}`)}
	send := func(dup string) {
		t.Helper()
		r, _, err := tr.transfer(ctx, m, dup)
		if err != nil {
			t.Fatal(err)
		}
		state, err := r.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := accepted(q, state); err != nil {
			t.Fatalf("a send with duplicate id %q: %v", dup, err)
		}
	}
	first := tr.duplicateID()
	send(first)
	send(first) // the resend: accepted, not stored
	send(tr.duplicateID())
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	for range 2 {
		d := transporttest.Receive(t, c, 30*time.Second)
		if _, ok := d.Headers[propDuplicateID]; ok {
			t.Errorf("the delivery carries %s: %v", propDuplicateID, d.Headers)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	transporttest.ExpectNothing(t, c, 2*time.Second)
}
