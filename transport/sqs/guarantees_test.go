package sqs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// createQueue creates name with attrs through the raw client and returns its URL.
func createQueue(t *testing.T, tr *Transport, name string, attrs map[string]string) string {
	t.Helper()
	out, err := rawClient(t, tr).CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateQueue %s: %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = rawClient(t, tr).DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
	})
	return aws.ToString(out.QueueUrl)
}

func queueArn(t *testing.T, tr *Transport, url string) string {
	t.Helper()
	out, err := rawClient(t, tr).GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes["QueueArn"]
}

func consumeT(t *testing.T, tr *Transport, q string, prefetch int) transport.Consumer {
	t.Helper()
	c, err := tr.Consume(context.Background(), q, transport.ConsumeOptions{Prefetch: prefetch})
	if err != nil {
		t.Fatalf("Consume(%q): %v", q, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func ack(t *testing.T, c transport.Consumer, d *transport.Delivery) {
	t.Helper()
	if err := c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatalf("ack: %v", err)
	}
}

// TestHandOffReachesNativeDLQ: a poison body handed off on every delivery is moved by
// the queue's RedrivePolicy to the native dead-letter queue after maxReceiveCount.
func TestHandOffReachesNativeDLQ(t *testing.T) {
	t.Parallel()
	tr := openTest(t, WithWaitTime(time.Second))
	q := transporttest.UniqueName("bqredrive")
	dlqURL := createQueue(t, tr, q+"-dlq", nil)
	createQueue(t, tr, q, map[string]string{
		"VisibilityTimeout": "1",
		"RedrivePolicy":     fmt.Sprintf(`{"maxReceiveCount":"2","deadLetterTargetArn":"%s"}`, queueArn(t, tr, dlqURL)),
	})
	poison := []byte(`{"job": 42, "not":"an envelope"`)
	if err := tr.Publish(ctxT(t, 10*time.Second), &transport.Message{Queue: q, Body: poison, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	c := consumeT(t, tr, q, 1)
	for i := range 2 {
		d := transporttest.Receive(t, c, 20*time.Second)
		if !bytes.Equal(d.Body, poison) {
			t.Fatalf("delivery %d body = %q", i+1, d.Body)
		}
		if d.Redeliveries != i {
			t.Errorf("delivery %d: Redeliveries = %d, want %d", i+1, d.Redeliveries, i)
		}
		if !d.HasAttemptsHeader || d.AttemptsHeader != 1 {
			t.Errorf("attempts header = %d (present %v), want 1", d.AttemptsHeader, d.HasAttemptsHeader)
		}
		if err := c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.HandOff}); err != nil {
			t.Fatalf("HandOff: %v", err)
		}
	}
	// The third receive finds the message over its maxReceiveCount: SQS moves it.
	transporttest.ExpectNothing(t, c, 4*time.Second)
	dc := consumeT(t, tr, q+"-dlq", 1)
	d := transporttest.Receive(t, dc, 20*time.Second)
	if !bytes.Equal(d.Body, poison) {
		t.Fatalf("native DLQ body = %q, want the poison body byte for byte", d.Body)
	}
	ack(t, dc, d)
}

// TestHeartbeatKeepsLongHandlerInvisible: a held delivery is not redelivered after
// the queue's visibility timeout, because the consumer extends it.
func TestHeartbeatKeepsLongHandlerInvisible(t *testing.T) {
	t.Parallel()
	tr := openTest(t, WithWaitTime(time.Second))
	q := transporttest.UniqueName("bqheartbeat")
	createQueue(t, tr, q, map[string]string{"VisibilityTimeout": "1"})
	if err := tr.Publish(ctxT(t, 10*time.Second), &transport.Message{Queue: q, Body: []byte(`{"job":"urn:babel:test:slow"}`)}); err != nil {
		t.Fatal(err)
	}
	c := consumeT(t, tr, q, 1)
	d := transporttest.Receive(t, c, 20*time.Second)
	// A second consumer polls for four visibility timeouts while the first one holds it.
	other := consumeT(t, tr, q, 1)
	transporttest.ExpectNothing(t, other, 4*time.Second)
	ack(t, c, d)
	transporttest.ExpectNothing(t, other, 2*time.Second)
}

// TestSettleWriteFailureKeepsOriginal: when a settle write is refused, nothing is
// deleted, the error matches ErrSettleWrite, and a Rewind brings the message back. The
// writes are made in order and stop at the refused one: the write before it stays made
// (SQS cannot take it back) and the write after it is never made.
func TestSettleWriteFailureKeepsOriginal(t *testing.T) {
	t.Parallel()
	tr := openTest(t, WithWaitTime(time.Second))
	q := transporttest.UniqueName("bqsettlefail")
	deleteQueueLater(t, tr, q)
	body := []byte(`{"job":"urn:babel:test:keep","attempts":0}`)
	if err := tr.Publish(ctxT(t, 10*time.Second), &transport.Message{Queue: q, Body: body}); err != nil {
		t.Fatal(err)
	}
	c := consumeT(t, tr, q, 1)
	d := transporttest.Receive(t, c, 20*time.Second)
	writes := []*transport.Message{
		{Queue: q + "-ok", Body: []byte(`{"first":"write"}`)},
		{Queue: "no such queue!", Body: body}, // SQS refuses the name
		{Queue: q + "-after", Body: []byte(`{"never":"made"}`)},
	}
	deleteQueueLater(t, tr, q+"-ok")
	deleteQueueLater(t, tr, q+"-after")
	queueURL(t, tr, q+"-after")
	err := c.Settle(ctxT(t, 30*time.Second), d, transport.Settlement{Outcome: transport.Ack, Writes: writes})
	var swe *transport.SettleWriteError
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.As(err, &swe) || swe.Queue != "no such queue!" {
		t.Fatalf("Settle with a refused write = %v, want a SettleWriteError naming the queue", err)
	}
	if err := c.Settle(context.Background(), d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatalf("Rewind after a failed write: %v", err)
	}
	d = transporttest.Receive(t, c, 20*time.Second)
	if !bytes.Equal(d.Body, body) || d.Redeliveries != 1 {
		t.Fatalf("after the failed settle: body %q, Redeliveries %d; want the original, 1", d.Body, d.Redeliveries)
	}
	ack(t, c, d)
	ok := consumeT(t, tr, q+"-ok", 1)
	w := transporttest.Receive(t, ok, 20*time.Second)
	if string(w.Body) != `{"first":"write"}` {
		t.Fatalf("%s-ok holds %q, want the write made before the refused one", q, w.Body)
	}
	ack(t, ok, w)
	transporttest.ExpectNothing(t, consumeT(t, tr, q+"-after", 1), 2*time.Second)
}

// TestSizeLimit: every write is checked against SQS's limit, the body and the
// attributes together: the error names the broker, the queue, the size and the limit;
// a message at the limit is accepted by the broker; a settle write over it
// acknowledges nothing.
func TestSizeLimit(t *testing.T) {
	t.Parallel()
	tr := openTest(t, WithWaitTime(time.Second))
	q := transporttest.UniqueName("bqsize")
	deleteQueueLater(t, tr, q)
	ctx := ctxT(t, 60*time.Second)
	m := &transport.Message{Queue: q, Headers: map[string]string{"h": "v"}, Projection: transport.Projection{URN: "urn:babel:test:size", MessageID: "m-1"}}
	// bq-job, bq-message-id and h, each with its data type String.
	attrs := len(AttrJob+"String"+"urn:babel:test:size") + len(AttrMessageID+"String"+"m-1") + len("h"+"String"+"v")

	m.Body = bytes.Repeat([]byte("x"), MaxMessageSize-attrs+1)
	err := tr.Publish(ctx, m)
	var tl *transport.TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("Publish over the limit = %v, want a *transport.TooLargeError", err)
	}
	if tl.Broker != "sqs" || tl.Queue != q || tl.Size != MaxMessageSize+1 || tl.Limit != MaxMessageSize {
		t.Errorf("TooLargeError = %+v", tl)
	}
	if !strings.Contains(err.Error(), "1048576") {
		t.Errorf("error %q does not name the limit", err)
	}

	m.Body = m.Body[1:]
	if err := tr.Publish(ctx, m); err != nil {
		t.Fatalf("Publish at the limit: %v", err)
	}
	c := consumeT(t, tr, q, 1)
	d := transporttest.Receive(t, c, 20*time.Second)
	if !bytes.Equal(d.Body, m.Body) {
		t.Fatalf("received %d bytes, want the %d published", len(d.Body), len(m.Body))
	}
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{
		{Queue: q + "-dlq", Body: bytes.Repeat([]byte("z"), MaxMessageSize+1)},
	}})
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("oversized settle write = %v, want ErrSettleWrite and ErrTooLarge", err)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatal(err)
	}
	d = transporttest.Receive(t, c, 20*time.Second)
	if !bytes.Equal(d.Body, m.Body) {
		t.Fatal("the delivery whose settle write was too large did not come back")
	}
	ack(t, c, d)

	// max_message_size lowers the limit for queues configured smaller.
	small := openTestURL(t, testURL(t)+"&max_message_size=2048")
	err = small.Publish(ctx, &transport.Message{Queue: q, Body: bytes.Repeat([]byte("x"), 2049)})
	if !errors.As(err, &tl) || tl.Limit != 2048 {
		t.Fatalf("Publish over max_message_size=2048 = %v", err)
	}
}

// TestSchemaVersionAndAttempts: the gate reads bq-schema-version as the string SQS
// holds; an absent attribute is nil; bq-attempts carries a poison body's count.
func TestSchemaVersionAndAttempts(t *testing.T) {
	tr := openTest(t, WithWaitTime(time.Second))
	q := transporttest.UniqueName("bqschema")
	deleteQueueLater(t, tr, q)
	ctx := ctxT(t, 60*time.Second)
	msgs := []*transport.Message{
		{Queue: q, Body: []byte(`{"n":"projected"}`), Projection: transport.Projection{URN: "urn:babel:a:b", SchemaVersion: 1}},
		{Queue: q, Body: []byte(`{"n":"raw"}`), Attempts: 3},
		{Queue: q, Body: []byte(`{"n":"v2"}`), Headers: map[string]string{"bq-schema-version": "2"}},
		{Queue: q, Body: []byte(`{"n":"space"}`), Headers: map[string]string{"bq-schema-version": " 1"}},
	}
	for _, m := range msgs {
		if err := tr.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]struct {
		sv       any
		attempts int
		has      bool
	}{
		`{"n":"projected"}`: {"1", 0, false},
		`{"n":"raw"}`:       {nil, 3, true},
		`{"n":"v2"}`:        {"2", 0, false},
		`{"n":"space"}`:     {" 1", 0, false},
	}
	c := consumeT(t, tr, q, 4)
	for range msgs {
		d := transporttest.Receive(t, c, 20*time.Second)
		w, ok := want[string(d.Body)]
		if !ok {
			t.Fatalf("unexpected body %q", d.Body)
		}
		if d.SchemaVersion != w.sv {
			t.Errorf("%s: SchemaVersion = %#v, want %#v", d.Body, d.SchemaVersion, w.sv)
		}
		if d.HasAttemptsHeader != w.has || d.AttemptsHeader != w.attempts {
			t.Errorf("%s: attempts header = %d/%v, want %d/%v", d.Body, d.AttemptsHeader, d.HasAttemptsHeader, w.attempts, w.has)
		}
		if _, leaked := d.Headers["bq-schema-version"]; leaked {
			t.Errorf("%s: the projected attribute shows up as a header: %v", d.Body, d.Headers)
		}
		ack(t, c, d)
	}
}

// TestWritesSQSCannotCarry: too many attributes, a bad header name, an empty header
// value and a non-text body fail with typed errors before anything is sent.
func TestWritesSQSCannotCarry(t *testing.T) {
	tr := openTest(t)
	q := transporttest.UniqueName("bqrefuse")
	deleteQueueLater(t, tr, q)
	full := transport.Projection{URN: "urn:babel:a:b", TraceID: "t", MessageID: "m", Lang: "go", SchemaVersion: 1, CreatedAt: 1}
	headers := map[string]string{}
	for i := range 5 {
		headers[fmt.Sprintf("h%d", i)] = "v"
	}
	ctx := ctxT(t, 30*time.Second)
	err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`), Projection: full, Headers: headers})
	if !errors.Is(err, ErrTooManyAttributes) || !strings.Contains(err.Error(), "11") {
		t.Errorf("11 attributes: %v, want ErrTooManyAttributes naming the count", err)
	}
	delete(headers, "h0")
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`), Projection: full, Headers: headers}); err != nil {
		t.Errorf("exactly 10 attributes: %v", err)
	}
	for name, value := range map[string]string{"has space": "v", "AWS.trace": "v", ".x": "v", "ok-name": "", "bq-key": "k"} {
		err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`), Headers: map[string]string{name: value}})
		var he *HeaderError
		if !errors.Is(err, ErrBadHeader) || !errors.As(err, &he) || he.Name != name {
			t.Errorf("header %q=%q: %v, want a HeaderError naming it", name, value, err)
		}
	}
	for _, b := range [][]byte{{'{', 0xff, '}'}, []byte("{\x00}"), []byte("\uFFFE")} {
		if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: b}); !errors.Is(err, ErrBodyNotText) {
			t.Errorf("body %q: %v, want ErrBodyNotText", b, err)
		}
	}
	// The one message that was valid is the only one on the queue.
	c := consumeT(t, tr, q, 2)
	d := transporttest.Receive(t, c, 20*time.Second)
	if len(d.Headers) != 4 {
		t.Errorf("headers = %v, want h1..h4", d.Headers)
	}
	ack(t, c, d)
	transporttest.ExpectNothing(t, c, time.Second)
}

// TestQueueDeletedUnderConsumer: a queue deleted while a consumer and a publisher hold
// its URL (an emulator restart looks the same) is looked up again and re-created; the
// next message is delivered.
func TestQueueDeletedUnderConsumer(t *testing.T) {
	tr := openTest(t, WithWaitTime(time.Second))
	q := transporttest.UniqueName("bqvanish")
	deleteQueueLater(t, tr, q)
	c := consumeT(t, tr, q, 1)
	url := queueURL(t, tr, q)
	if _, err := rawClient(t, tr).DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"job":"urn:babel:test:back"}`)
	// The publisher's cached URL is stale; Publish re-resolves it once.
	if err := tr.Publish(ctxT(t, 30*time.Second), &transport.Message{Queue: q, Body: body}); err != nil {
		t.Fatalf("Publish after the queue vanished: %v", err)
	}
	d := transporttest.Receive(t, c, 30*time.Second)
	if !bytes.Equal(d.Body, body) {
		t.Fatalf("body = %q", d.Body)
	}
	ack(t, c, d)
}

// slowSends makes every SendMessage wait before it reaches the broker, and counts the
// visibility calls the consumer makes.
type slowSends struct {
	api
	delay         time.Duration
	single, batch atomic.Int32
}

func (s *slowSends) SendMessage(ctx context.Context, in *awssqs.SendMessageInput, o ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.api.SendMessage(ctx, in, o...)
}

func (s *slowSends) ChangeMessageVisibility(ctx context.Context, in *awssqs.ChangeMessageVisibilityInput, o ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error) {
	s.single.Add(1)
	return s.api.ChangeMessageVisibility(ctx, in, o...)
}

func (s *slowSends) ChangeMessageVisibilityBatch(ctx context.Context, in *awssqs.ChangeMessageVisibilityBatchInput, o ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityBatchOutput, error) {
	s.batch.Add(1)
	return s.api.ChangeMessageVisibilityBatch(ctx, in, o...)
}

// TestSlowSettleDoesNotStallHeartbeat: while one delivery's settle write is slow, it
// and the other held deliveries keep their visibility extended (in batches), so a
// second consumer sees none of them for several visibility timeouts.
func TestSlowSettleDoesNotStallHeartbeat(t *testing.T) {
	t.Parallel()
	const held = 12
	tr := openTest(t, WithWaitTime(time.Second))
	q := transporttest.UniqueName("bqslowsettle")
	createQueue(t, tr, q, map[string]string{"VisibilityTimeout": "2"})
	deleteQueueLater(t, tr, q+"-retry")
	ctx := ctxT(t, 60*time.Second)
	for i := range held {
		if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":` + strconv.Itoa(i) + `}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// Slow (longer than the visibility timeout), but within the 4 s bound of a
	// settlement's call (settleCallTimeout).
	slow := &slowSends{api: tr.client, delay: 3500 * time.Millisecond}
	tr.client = slow
	t.Cleanup(func() { tr.client = slow.api }) // after the consumer closed, before the queues go
	c := consumeT(t, tr, q, held)
	ds := make([]*transport.Delivery, held)
	for i := range ds {
		ds[i] = transporttest.Receive(t, c, 20*time.Second)
	}
	settled := make(chan error, 1)
	go func() {
		settled <- c.Settle(ctx, ds[0], transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: q + "-retry", Body: ds[0].Body}}})
	}()
	// Two visibility timeouts while the settle write waits.
	other := consumeT(t, openTest(t, WithWaitTime(time.Second)), q, held)
	transporttest.ExpectNothing(t, other, 4*time.Second)
	if err := <-settled; err != nil {
		t.Fatalf("the slow settle: %v", err)
	}
	for _, d := range ds[1:] {
		ack(t, c, d)
	}
	transporttest.ExpectNothing(t, other, time.Second)
	if n := slow.single.Load(); n != 0 {
		t.Errorf("the heartbeat made %d single ChangeMessageVisibility calls, want batches only", n)
	}
	if slow.batch.Load() == 0 {
		t.Error("no ChangeMessageVisibilityBatch call extended the held messages")
	}
}

// TestAbandonedReceiveHidesNothing: a Receive whose context ends while its long poll
// waits leaves the poll running: the message that poll then receives is handed to the
// next Receive at once, received once, where a cancelled poll could leave it hidden
// until its visibility timeout (a minute here) lapsed.
func TestAbandonedReceiveHidesNothing(t *testing.T) {
	t.Parallel()
	tr := openTest(t, WithWaitTime(5*time.Second))
	q := transporttest.UniqueName("bqabandon")
	createQueue(t, tr, q, map[string]string{"VisibilityTimeout": "60"})
	c := consumeT(t, tr, q, 1)
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Receive(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on an empty queue = %v, want the context's deadline", err)
	}
	body := []byte(`{"job":"urn:babel:test:abandoned"}`)
	if err := tr.Publish(ctxT(t, 10*time.Second), &transport.Message{Queue: q, Body: body}); err != nil {
		t.Fatal(err)
	}
	d := transporttest.Receive(t, c, 15*time.Second)
	if !bytes.Equal(d.Body, body) || d.Redeliveries != 0 {
		t.Fatalf("got %q with Redeliveries %d, want the message received once", d.Body, d.Redeliveries)
	}
	ack(t, c, d)
}
