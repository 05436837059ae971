package artemis_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/artemis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// manage runs one Artemis management operation on the broker resource through the
// activemq.management address and fails the test unless it succeeded.
func manage(t *testing.T, op string, args string) {
	t.Helper()
	if ok, answer := manageBroker(t, op, args); !ok {
		t.Fatalf("management %s failed: %v", op, answer)
	}
}

// manageBroker runs one management operation on the broker resource and returns
// whether it succeeded, and the broker's answer. The answer comes on a temporary queue.
func manageBroker(t testing.TB, op string, args string) (bool, any) {
	t.Helper()
	conn := rawConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sess.NewReceiver(ctx, "", &amqp.ReceiverOptions{DynamicAddress: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sess.NewSender(ctx, "activemq.management", nil)
	if err != nil {
		t.Fatal(err)
	}
	reply := r.Address()
	err = s.Send(ctx, &amqp.Message{
		Properties:            &amqp.MessageProperties{ReplyTo: &reply},
		ApplicationProperties: map[string]any{"_AMQ_ResourceName": "broker", "_AMQ_OperationName": op},
		Value:                 args,
	}, nil)
	if err != nil {
		t.Fatalf("management %s: %v", op, err)
	}
	got, err := r.Receive(ctx, nil)
	if err != nil {
		t.Fatalf("management %s: no reply: %v", op, err)
	}
	_ = r.AcceptMessage(ctx, got)
	ok, _ := got.ApplicationProperties["_AMQ_OperationSucceeded"].(bool)
	return ok, got.Value
}

// fullQueue makes queue an address that holds one message at most and refuses writes
// beyond it (address-full-policy FAIL), and fills it.
func fullQueue(t *testing.T, tr transport.Transport, queue string) {
	t.Helper()
	manage(t, "addAddressSettings", `["`+queue+`","{\"maxSizeBytes\":1,\"pageSizeBytes\":1,\"addressFullMessagePolicy\":\"FAIL\"}"]`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Publish(ctx, &transport.Message{Queue: queue, Body: []byte(`{"filler":true}`)}); err != nil {
		t.Fatalf("filling %s: %v", queue, err)
	}
	err := tr.Publish(ctx, &transport.Message{Queue: queue, Body: []byte(`{"filler":2}`)})
	if !errors.Is(err, artemis.ErrRejected) {
		t.Fatalf("a write to the full address %s = %v, want ErrRejected", queue, err)
	}
}

// refusingRig opens a transport, its settle writes pipelined or not, with a queue
// Artemis refuses writes to (dlq, full), a queue it takes them on (ok), and one
// message, body, published on a fresh source queue q.
func refusingRig(t *testing.T, pipelined bool) (tr *artemis.Transport, q, ok, dlq string, body []byte) {
	t.Helper()
	tr = openTransport(t, artemis.WithPipelinedSettles(pipelined))
	q, ok, dlq = transporttest.UniqueName("bqtest-src"), transporttest.UniqueName("bqtest-ok"), transporttest.UniqueName("bqtest-full")
	fullQueue(t, tr, dlq)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body = []byte(`{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body}); err != nil {
		t.Fatal(err)
	}
	return tr, q, ok, dlq, body
}

// Not pipelined (pipeline_settles=0), a settle write Artemis refuses acknowledges
// nothing: Settle fails with a SettleWriteError naming the queue, the delivery can then
// be rewound, and it comes back without a higher delivery-count. Pipelined:
// TestPipelinedRefusedSettleWriteGivesBack.
func TestRefusedSettleWriteAcksNothing(t *testing.T) {
	tr, q, ok, dlq, body := refusingRig(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	d := transporttest.Receive(t, c, 30*time.Second)
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{
		{Queue: ok, Body: body},
		{Queue: dlq, Body: body},
	}})
	if !errors.Is(err, transport.ErrSettleWrite) {
		t.Fatalf("Settle with a refused write = %v, want ErrSettleWrite", err)
	}
	var swe *transport.SettleWriteError
	if !errors.As(err, &swe) || swe.Queue != dlq {
		t.Fatalf("Settle error %v does not name the refused queue %s", err, dlq)
	}
	if !errors.Is(err, artemis.ErrRejected) {
		t.Errorf("Settle error %v does not carry the broker's refusal", err)
	}
	// Not acknowledged: the runtime rewinds it and it comes back, not counted (the
	// write was refused, the delivery did not fail): an outage of the dead-letter queue
	// does not use up Artemis's max-delivery-attempts.
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatalf("Rewind after the failed Ack: %v", err)
	}
	again := transporttest.Receive(t, c, 30*time.Second)
	if !bytes.Equal(again.Body, body) || again.Redeliveries != 0 {
		t.Fatalf("after a refused write the delivery came back as %q with delivery-count %d, want the body with 0", again.Body, again.Redeliveries)
	}
	if err := c.Settle(ctx, again, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
}

// The link credit is the prefetch: a consumer never holds more unsettled deliveries
// than ConsumeOptions.Prefetch, and the rest stay available to other consumers.
func TestPrefetchIsLinkCredit(t *testing.T) {
	tr := openTransport(t)
	q := transporttest.UniqueName("bqtest-credit")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 5 {
		if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte{'0' + byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	c1, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c1.Close(context.Background()) }()
	a := transporttest.Receive(t, c1, 30*time.Second)
	transporttest.Receive(t, c1, 30*time.Second)
	transporttest.ExpectNothing(t, c1, time.Second)

	c2, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c2.Close(context.Background()) }()
	for range 3 {
		d := transporttest.Receive(t, c2, 30*time.Second)
		if err := c2.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	transporttest.ExpectNothing(t, c2, time.Second)
	// Close the second consumer: with credit left it could otherwise be the one Artemis
	// redelivers the rewound message to.
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Settling one delivery of the first consumer gives it credit again.
	if err := c1.Settle(ctx, a, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatal(err)
	}
	back := transporttest.Receive(t, c1, 30*time.Second)
	if !bytes.Equal(back.Body, a.Body) {
		t.Errorf("got %q after the rewind, want %q", back.Body, a.Body)
	}
}

// rawSend writes msg to queue with plain go-amqp, as a peer SDK would.
func rawSend(t *testing.T, queue string, msg *amqp.Message) {
	t.Helper()
	conn := rawConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sess.NewSender(ctx, queue, &amqp.SenderOptions{TargetCapabilities: []string{"queue"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, msg, nil); err != nil {
		t.Fatal(err)
	}
}

// Delivery.SchemaVersion is bq_schema_version exactly as a producer typed it, nil when
// absent; other SDKs' bodies in an AMQP value section arrive as their bytes.
func TestPeerMessagesAsSent(t *testing.T) {
	tr := openTransport(t)
	cases := []struct {
		name   string
		msg    *amqp.Message
		body   string
		schema any
	}{
		{"string 1 in a value section", &amqp.Message{Value: `{"job":"a"}`, ApplicationProperties: map[string]any{"bq_schema_version": "1"}}, `{"job":"a"}`, "1"},
		{"string 2", &amqp.Message{Data: [][]byte{[]byte(`{}`)}, ApplicationProperties: map[string]any{"bq_schema_version": "2"}}, `{}`, "2"},
		{"padded", &amqp.Message{Data: [][]byte{[]byte(`{}`)}, ApplicationProperties: map[string]any{"bq_schema_version": " 1"}}, `{}`, " 1"},
		{"integer", &amqp.Message{Data: [][]byte{[]byte(`{}`)}, ApplicationProperties: map[string]any{"bq_schema_version": int32(1)}}, `{}`, int64(1)},
		{"double", &amqp.Message{Data: [][]byte{[]byte(`{}`)}, ApplicationProperties: map[string]any{"bq_schema_version": 1.0}}, `{}`, 1.0},
		{"boolean", &amqp.Message{Data: [][]byte{[]byte(`{}`)}, ApplicationProperties: map[string]any{"bq_schema_version": true}}, `{}`, true},
		{"absent, binary value body", &amqp.Message{Value: []byte{0xff, '{'}}, "\xff{", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := transporttest.UniqueName("bqtest-peer")
			rawSend(t, q, tc.msg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close(context.Background()) }()
			d := transporttest.Receive(t, c, 30*time.Second)
			if string(d.Body) != tc.body {
				t.Errorf("body = %q, want %q", d.Body, tc.body)
			}
			if d.SchemaVersion != tc.schema {
				t.Errorf("SchemaVersion = %#v (%T), want %#v (%T)", d.SchemaVersion, d.SchemaVersion, tc.schema, tc.schema)
			}
			if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Out-of-band headers ride as string application properties, never replace a projected
// one, and come back without the projected ones.
func TestHeadersNeverReplaceProjection(t *testing.T) {
	tr := openTransport(t)
	q := transporttest.UniqueName("bqtest-hdr")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := tr.Publish(ctx, &transport.Message{
		Queue: q, Body: []byte(`{}`), Attempts: 2,
		Headers:    map[string]string{"bq_attempts": "99", "bq_schema_version": "7", "bq_app_id": "x", "traceparent": "00-1-2-01"},
		Projection: transport.Projection{SchemaVersion: 1, Lang: "go"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	d := transporttest.Receive(t, c, 30*time.Second)
	if d.AttemptsHeader != 2 || d.SchemaVersion != "1" {
		t.Errorf("attempts header %d, schema %v: a user header replaced a projected property", d.AttemptsHeader, d.SchemaVersion)
	}
	if len(d.Headers) != 1 || d.Headers["traceparent"] != "00-1-2-01" {
		t.Errorf("Headers = %v, want only traceparent", d.Headers)
	}
	_ = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack})
}

// A consumer or transport used after Close says so.
func TestClosed(t *testing.T) {
	tr := openTransport(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := tr.Consume(ctx, transporttest.UniqueName("bqtest-closed"), transport.ConsumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Receive(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Receive after Close = %v, want ErrClosed", err)
	}
	c2, err := tr.Consume(ctx, transporttest.UniqueName("bqtest-closed"), transport.ConsumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := c2.Receive(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Receive after the transport closed = %v, want ErrClosed", err)
	}
	err = tr.Publish(ctx, &transport.Message{Queue: "x", Body: []byte("{}")})
	if !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
	if _, err := tr.Consume(ctx, "x", transport.ConsumeOptions{}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Consume after Close = %v, want ErrClosed", err)
	}
	if err := tr.Close(ctx); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// A transport built around a user's connection works and never redials on its own.
func TestNewAroundUserConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := artemis.DialURL(ctx, brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := artemis.New(conn, artemis.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	q := transporttest.UniqueName("bqtest-new")
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := transporttest.Receive(t, c, 30*time.Second)
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close() // the user's connection goes away
	err = tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":2}`)})
	if err == nil || !strings.Contains(err.Error(), "WithDial") {
		t.Errorf("Publish after the user's connection closed = %v, want an error pointing at WithDial", err)
	}
	_ = tr.Close(ctx)
}
