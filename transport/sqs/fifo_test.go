package sqs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func fifoURL(t *testing.T, extra string) string {
	t.Helper()
	raw := testURL(t)
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	return raw + sep + "fifo=1&wait_time=1" + extra
}

// uniqueIDs gives every user publish its own meta.id. The kit reuses one meta.id for
// distinct messages; a FIFO queue deduplicates on meta.id by design.
type uniqueIDs struct{ *Transport }

func (u uniqueIDs) Publish(ctx context.Context, m *transport.Message) error {
	c := *m
	c.Projection.MessageID = transporttest.UniqueName("id")
	return u.Transport.Publish(ctx, &c)
}

func TestFIFOTransportKit(t *testing.T) {
	t.Parallel()
	admin := openTest(t)
	transporttest.Run(t, transporttest.Config{
		NewQueue: kitQueues(admin),
		Open: func(t *testing.T) transport.Transport {
			return uniqueIDs{openTestURL(t, fifoURL(t, ""))}
		},
		TextBodiesOnly:     true,
		NativeRedeliveries: true,
		ReceiveTimeout:     20 * time.Second,
	})
}

// rawReceive reads up to 10 messages of an SQS queue with their group ids and
// deletes them.
func rawReceive(t *testing.T, tr *Transport, queue string, want int) []types.Message {
	t.Helper()
	url := queueURL(t, tr, queue)
	var got []types.Message
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		out, err := rawClient(t, tr).ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			got = append(got, m)
			_, _ = rawClient(t, tr).DeleteMessage(context.Background(), &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
		}
	}
	return got
}

func TestFIFONamingAndGroups(t *testing.T) {
	tr := openTestURL(t, fifoURL(t, ""))
	q := transporttest.UniqueName("bqfifo")
	deleteQueueLater(t, tr, q)
	if u := queueURL(t, tr, q); !strings.HasSuffix(u, "/"+q+".fifo") {
		t.Fatalf("fifo=1 queue %q has URL %q, want a queue named %s.fifo", q, u, q)
	}
	ctx := ctxT(t, 30*time.Second)
	for _, m := range []*transport.Message{
		{Queue: q, Body: []byte(`{"n":"keyed"}`), Key: []byte("order-7"), Projection: transport.Projection{MessageID: "a"}},
		{Queue: q, Body: []byte(`{"n":"nokey"}`), Projection: transport.Projection{MessageID: "b"}},
		{Queue: q, Body: []byte(`{"n":"oddkey"}`), Key: []byte("ключ with spaces"), Projection: transport.Projection{MessageID: "c"}},
	} {
		if err := tr.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	groups := map[string]string{}
	for _, m := range rawReceive(t, tr, q, 3) {
		groups[aws.ToString(m.Body)] = m.Attributes["MessageGroupId"]
	}
	if groups[`{"n":"keyed"}`] != "order-7" || groups[`{"n":"nokey"}`] != DefaultGroupID || !strings.HasPrefix(groups[`{"n":"oddkey"}`], "k-") {
		t.Errorf("groups = %v, want the key, %q, and a hashed key", groups, DefaultGroupID)
	}

	// group_id wins over the key.
	tg := openTestURL(t, fifoURL(t, "&group_id=tenant-1"))
	if err := tg.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":"g"}`), Key: []byte("order-7"), Projection: transport.Projection{MessageID: "d"}}); err != nil {
		t.Fatal(err)
	}
	got := rawReceive(t, tg, q, 1)
	if len(got) != 1 || got[0].Attributes["MessageGroupId"] != "tenant-1" {
		t.Errorf("with group_id=tenant-1 the group is %v", got)
	}
}

// TestFIFODeduplication: the same meta.id and attempts is one message; a retry
// (attempts+1) and a release of an unchanged body through Settle are not deduplicated.
func TestFIFODeduplication(t *testing.T) {
	tr := openTestURL(t, fifoURL(t, ""))
	q := transporttest.UniqueName("bqdedup")
	deleteQueueLater(t, tr, q)
	ctx := ctxT(t, 60*time.Second)
	m := &transport.Message{Queue: q, Body: []byte(`{"job":"urn:babel:t:d","attempts":0}`), Projection: transport.Projection{MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567"}}
	for range 2 {
		if err := tr.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	c := consumeT(t, tr, q, 1)
	d := transporttest.Receive(t, c, 20*time.Second)
	// Release: the same bytes, the same meta.id, the same attempts, to the same queue.
	release := *m
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{&release}}); err != nil {
		t.Fatal(err)
	}
	d = transporttest.Receive(t, c, 20*time.Second)
	if string(d.Body) != string(m.Body) {
		t.Fatalf("released body = %q", d.Body)
	}
	// Retry: attempts+1.
	retry := *m
	retry.Body = []byte(`{"job":"urn:babel:t:d","attempts":1}`)
	retry.Attempts = 1
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{&retry}}); err != nil {
		t.Fatal(err)
	}
	d = transporttest.Receive(t, c, 20*time.Second)
	if string(d.Body) != string(retry.Body) {
		t.Fatalf("retried body = %q", d.Body)
	}
	ack(t, c, d)
	// The duplicate publish never arrived.
	transporttest.ExpectNothing(t, c, 2*time.Second)
}

// TestFIFOSettleWriteKeepsGroup: a settle write of a message that came without our
// bq-key attribute (another producer's) stays in the consumed message's group.
func TestFIFOSettleWriteKeepsGroup(t *testing.T) {
	tr := openTestURL(t, fifoURL(t, ""))
	q := transporttest.UniqueName("bqgroup")
	deleteQueueLater(t, tr, q)
	ctx := ctxT(t, 60*time.Second)
	_, err := rawClient(t, tr).SendMessage(ctx, &awssqs.SendMessageInput{
		QueueUrl: aws.String(queueURL(t, tr, q)), MessageBody: aws.String(`{"n":"foreign"}`),
		MessageGroupId: aws.String("py-group"), MessageDeduplicationId: aws.String("x1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	c := consumeT(t, tr, q, 1)
	d := transporttest.Receive(t, c, 20*time.Second)
	if d.Key != nil {
		t.Errorf("a message without bq-key came with key %q", d.Key)
	}
	next := q + "-next"
	deleteQueueLater(t, tr, next)
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: next, Body: d.Body, Key: d.Key}}}); err != nil {
		t.Fatal(err)
	}
	got := rawReceive(t, tr, next, 1)
	if len(got) != 1 || got[0].Attributes["MessageGroupId"] != "py-group" {
		t.Fatalf("settle write group: %v, want py-group", got)
	}
	if _, invented := got[0].MessageAttributes[AttrKey]; invented {
		t.Error("the settle write invented a key")
	}
}

func TestFIFORuntimeSettlement(t *testing.T) {
	t.Parallel()
	admin := openTest(t)
	transporttest.RunRuntime(t, transporttest.Config{
		NewQueue: kitQueues(admin),
		Open: func(t *testing.T) transport.Transport {
			return openTestURL(t, fifoURL(t, ""))
		},
		TextBodiesOnly:     true,
		NativeRedeliveries: true,
		ReceiveTimeout:     20 * time.Second,
	})
}
