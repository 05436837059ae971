package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestPipelinedSettleWriteFailureRewinds: a pipelined settle write (the default) that
// fails does not hold up Settle, which returns nil once the write is handed to the
// producer, but it commits nothing either: the transport rewinds the record itself, it
// is delivered again, and once the write can succeed the record is settled and committed
// and its write is on the topic once.
func TestPipelinedSettleWriteFailureRewinds(t *testing.T) {
	t.Parallel()
	tr := openKafka(t, "auto_create_topics", "false", "delivery_timeout", "2s")
	q := newTopic(t, "bqtest-pipe")
	dlq := q + ".dlq"
	createTopic(t, q, 1)
	publishOK(t, tr, &transport.Message{Queue: q, Body: []byte(`{"n":1}`), Key: []byte("k")})
	c := consumeOn(t, tr, q, 4)
	dl := func(d *transport.Delivery) transport.Settlement {
		return transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: dlq, Body: d.Body, Key: d.Key}}}
	}
	d := transporttest.Receive(t, c, 30*time.Second)
	settleOK(t, c, d, dl(d)) // handed to the producer; the topic is missing
	d = transporttest.Receive(t, c, 30*time.Second)
	if string(d.Body) != `{"n":1}` || string(d.Key) != "k" {
		t.Fatalf("after the failed write the consumer handed out %q (key %q), want the same record", d.Body, d.Key)
	}
	if topicExists(t, dlq) {
		t.Fatal("the failed write created the topic with auto-creation off")
	}
	createTopic(t, dlq, 1)
	settleOK(t, c, d, dl(d))
	// The write is confirmed in the background; the record is committed then, and only
	// then: a new member of the group finds nothing once the first has closed.
	if vs := topicValues(t, dlq, 3*time.Second); len(vs) != 1 {
		t.Fatalf("%s holds %d records, want the one write", dlq, len(vs))
	}
	transporttest.ExpectNothing(t, c, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c2 := consumeOn(t, tr, q, 1)
	transporttest.ExpectNothing(t, c2, 5*time.Second)
}
