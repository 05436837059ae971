package sqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// fakeSQS hands out the messages it is given once, then answers empty receives; every
// other call succeeds. It stands in for a broker that sends garbage.
type fakeSQS struct {
	mu        sync.Mutex
	batches   [][]types.Message
	deleted   []string
	givenBack []string
	visAttrs  map[string]string
}

func (f *fakeSQS) SendMessage(context.Context, *awssqs.SendMessageInput, ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error) {
	return &awssqs.SendMessageOutput{}, nil
}

func (f *fakeSQS) SendMessageBatch(context.Context, *awssqs.SendMessageBatchInput, ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error) {
	return &awssqs.SendMessageBatchOutput{}, nil
}

func (f *fakeSQS) ListQueues(context.Context, *awssqs.ListQueuesInput, ...func(*awssqs.Options)) (*awssqs.ListQueuesOutput, error) {
	return &awssqs.ListQueuesOutput{}, nil
}

func (f *fakeSQS) ReceiveMessage(ctx context.Context, _ *awssqs.ReceiveMessageInput, _ ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error) {
	f.mu.Lock()
	if len(f.batches) > 0 {
		b := f.batches[0]
		f.batches = f.batches[1:]
		f.mu.Unlock()
		return &awssqs.ReceiveMessageOutput{Messages: b}, nil
	}
	f.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(50 * time.Millisecond):
		return nil, nil // a nil output is garbage too
	}
}

func (f *fakeSQS) DeleteMessage(_ context.Context, in *awssqs.DeleteMessageInput, _ ...func(*awssqs.Options)) (*awssqs.DeleteMessageOutput, error) {
	f.mu.Lock()
	f.deleted = append(f.deleted, aws.ToString(in.ReceiptHandle))
	f.mu.Unlock()
	return &awssqs.DeleteMessageOutput{}, nil
}

func (f *fakeSQS) ChangeMessageVisibility(context.Context, *awssqs.ChangeMessageVisibilityInput, ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error) {
	return &awssqs.ChangeMessageVisibilityOutput{}, nil
}

func (f *fakeSQS) ChangeMessageVisibilityBatch(_ context.Context, in *awssqs.ChangeMessageVisibilityBatchInput, _ ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityBatchOutput, error) {
	f.mu.Lock()
	for _, e := range in.Entries {
		f.givenBack = append(f.givenBack, aws.ToString(e.ReceiptHandle))
	}
	f.mu.Unlock()
	return nil, errors.New("batch refused")
}

func (f *fakeSQS) GetQueueUrl(context.Context, *awssqs.GetQueueUrlInput, ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error) {
	return &awssqs.GetQueueUrlOutput{QueueUrl: aws.String("http://fake/q")}, nil
}

func (f *fakeSQS) CreateQueue(context.Context, *awssqs.CreateQueueInput, ...func(*awssqs.Options)) (*awssqs.CreateQueueOutput, error) {
	return &awssqs.CreateQueueOutput{}, nil
}

func (f *fakeSQS) GetQueueAttributes(context.Context, *awssqs.GetQueueAttributesInput, ...func(*awssqs.Options)) (*awssqs.GetQueueAttributesOutput, error) {
	return &awssqs.GetQueueAttributesOutput{Attributes: f.visAttrs}, nil
}

// overflow is a batch larger than any request may ask for.
func overflow(n int) []types.Message {
	out := make([]types.Message, n)
	for i := range out {
		out[i] = types.Message{ReceiptHandle: aws.String(fmt.Sprintf("extra-%d", i)), Body: aws.String(`{}`)}
	}
	return out
}

func TestHostileBroker(t *testing.T) {
	f := &fakeSQS{
		visAttrs: map[string]string{"VisibilityTimeout": "forever"},
		batches: [][]types.Message{{
			{}, // nothing at all: no handle, skipped
			{ReceiptHandle: aws.String("h-nil-body")},
			{ReceiptHandle: aws.String("h-garbage"), Body: aws.String("\x00not text"),
				Attributes: map[string]string{"ApproximateReceiveCount": "-7", "MessageGroupId": ""},
				MessageAttributes: map[string]types.MessageAttributeValue{
					AttrSchemaVersion: {},                                                                 // no value: absent
					AttrAttempts:      {DataType: aws.String("Number"), StringValue: aws.String("1e999")}, // unreadable
					AttrKey:           {DataType: aws.String("Binary")},                                   // no bytes
					"x-binary":        {DataType: aws.String("Binary"), BinaryValue: []byte{0xff}},
					"x-nothing":       {},
				}},
			{ReceiptHandle: aws.String("h-huge"), Body: aws.String(`{}`),
				Attributes: map[string]string{"ApproximateReceiveCount": "99999999999999999999999"}},
		}, overflow(12)},
	}
	tr := newTransport(f, WithWaitTime(0))
	defer tr.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := tr.Consume(ctx, "q", transport.ConsumeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	var got []*transport.Delivery
	for range 3 {
		d, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		got = append(got, d)
		if d.Redeliveries < 0 {
			t.Errorf("Redeliveries = %d from a garbage count", d.Redeliveries)
		}
		if d.HasAttemptsHeader {
			t.Errorf("an unreadable bq-attempts read as %d", d.AttemptsHeader)
		}
		if d.SchemaVersion != nil {
			t.Errorf("a bq-schema-version without a value read as %#v", d.SchemaVersion)
		}
		if d.Body == nil {
			t.Error("nil body")
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Errorf("Settle: %v", err)
		}
	}
	if len(got[2].Headers) != 0 || got[2].Redeliveries != 0 {
		t.Errorf("overflowing count or binary headers leaked: %+v", got[2])
	}
	if _, ok := got[1].Headers["x-binary"]; ok {
		t.Error("a Binary attribute became a string header")
	}
	// A batch larger than asked for does not wedge the consumer: it takes what it has
	// credits for and gives the rest back.
	took := 0
	for {
		short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
		d, err := c.Receive(short)
		cancelShort()
		if err != nil {
			break
		}
		took++
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	if took == 0 {
		t.Error("nothing of the oversized batch was delivered")
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close with a refusing broker: %v", err)
	}
	if len(f.deleted) != 3+took || len(f.givenBack) != 12-took {
		t.Errorf("deleted %d and gave back %d; want %d and %d", len(f.deleted), len(f.givenBack), 3+took, 12-took)
	}
}

// TestBrokerDown: when ElasticMQ goes away after Open, Publish fails with an error
// instead of hanging, a consumer's Receive honours its context, a worker waiting in
// Receive meanwhile keeps retrying (and logs it), and once the broker is back the same
// consumer receives again.
func TestBrokerDown(t *testing.T) {
	var logs transporttest.LogBuffer
	tr, p := openProxied(t, "wait_time=0&publish_wait=1s", WithVisibilityTimeout(30*time.Second), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	q := transporttest.UniqueName("bqdown")
	queueURL(t, tr, q)
	deleteQueueLater(t, tr, q)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())

	p.Down()
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`)}); err == nil {
		t.Fatal("Publish to a broker that is down succeeded")
	}
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	if _, err := c.Receive(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Receive with the broker down = %v, want the context's deadline", err)
	}
	// A worker waits for the next delivery, as the runtime's workers do: the consumer
	// receives only for a caller (the kit's receive loop).
	type received struct {
		d   *transport.Delivery
		err error
	}
	got := make(chan received, 1)
	go func() {
		d, err := c.Receive(ctx)
		got <- received{d, err}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "receive failed; retrying") {
		if time.Now().After(deadline) {
			t.Fatalf("the consumer did not log its failing receives:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	p.Up()
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"back":true}`)}); err != nil {
		t.Fatalf("Publish once the broker is back: %v", err)
	}
	var r received
	select {
	case r = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery within 30s of the broker coming back")
	}
	if r.err != nil {
		t.Fatalf("Receive once the broker is back: %v", r.err)
	}
	if string(r.d.Body) != `{"back":true}` {
		t.Fatalf("received %q", r.d.Body)
	}
	if err := c.Settle(ctx, r.d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := c.Receive(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Receive after Close = %v, want ErrClosed", err)
	}
}

// TestHostileBrowse: a receive that answers neither messages nor an error reads as an
// empty queue, not a panic.
func TestHostileBrowse(t *testing.T) {
	f := &fakeSQS{visAttrs: map[string]string{"VisibilityTimeout": "30"}}
	tr := newTransport(f, WithWaitTime(0))
	defer tr.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	page, err := tr.Browse(ctx, "q", "", 10)
	if err != nil {
		t.Fatalf("Browse: %v", err)
	}
	if len(page.Deliveries) != 0 || !page.End {
		t.Errorf("Browse of a queue answered with nothing = %d deliveries, End %v; want none, the end", len(page.Deliveries), page.End)
	}
}
