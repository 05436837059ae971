package sqs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// uniqueBatchIDs gives every message of a confirmed batch its own meta.id (the kit
// reuses one, and a FIFO queue deduplicates on it by design).
type uniqueBatchIDs struct{ *Transport }

func (u uniqueBatchIDs) PublishConfirmed(ctx context.Context, msgs []*transport.Message) error {
	out := make([]*transport.Message, len(msgs))
	for i, m := range msgs {
		if m != nil {
			c := *m
			c.Projection.MessageID = transporttest.UniqueName("id")
			m = &c
		}
		out[i] = m
	}
	return u.Transport.PublishConfirmed(ctx, out)
}

// TestPublishConfirmedFIFO runs the confirmed-publish kit with SendMessageBatch on a
// FIFO queue of ElasticMQ (TestKit runs it on a standard queue).
func TestPublishConfirmedFIFO(t *testing.T) {
	t.Parallel()
	admin := openTest(t)
	transporttest.RunPublishConfirmed(t, transporttest.Config{
		NewQueue:       kitQueues(admin),
		Open:           func(t *testing.T) transport.Transport { return uniqueBatchIDs{openTestURL(t, fifoURL(t, ""))} },
		TextBodiesOnly: true,
		NoKeys:         true,
		ReceiveTimeout: 20 * time.Second,
	})
}

// countingBatches counts the SendMessageBatch calls and the entries they carried, and
// refuses the entries whose body contains refuse, as SQS refuses an entry of a batch.
type countingBatches struct {
	api
	calls, entries atomic.Int64
	refuse         string
}

func (c *countingBatches) SendMessageBatch(ctx context.Context, in *awssqs.SendMessageBatchInput, optFns ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error) {
	c.calls.Add(1)
	c.entries.Add(int64(len(in.Entries)))
	send := *in
	send.Entries = nil
	var refused []types.BatchResultErrorEntry
	for _, e := range in.Entries {
		if c.refuse != "" && strings.Contains(*e.MessageBody, c.refuse) {
			refused = append(refused, types.BatchResultErrorEntry{Id: e.Id, Code: stringPtr("InternalError"), Message: stringPtr("refused by the test"), SenderFault: false})
			continue
		}
		send.Entries = append(send.Entries, e)
	}
	out := &awssqs.SendMessageBatchOutput{}
	if len(send.Entries) > 0 {
		var err error
		if out, err = c.api.SendMessageBatch(ctx, &send, optFns...); err != nil {
			return nil, err
		}
	}
	out.Failed = append(out.Failed, refused...)
	return out, nil
}

func stringPtr(s string) *string { return &s }

// TestPublishConfirmedRunsAndRefusals: 25 messages for two queues, interleaved in runs,
// with one too large and one refused by SQS: the calls carry runs of at most ten
// consecutive messages of one queue, the two failures are reported at their indexes,
// and every other message is on its queue.
func TestPublishConfirmedRunsAndRefusals(t *testing.T) {
	t.Parallel()
	admin := openTest(t)
	qa, qb := transporttest.UniqueName("bqconfirm"), transporttest.UniqueName("bqconfirm")
	for _, q := range []string{qa, qb} {
		queueURL(t, admin, q)
		deleteQueueLater(t, admin, q)
	}
	tr := openTest(t, WithMaxMessageSize(4096))
	cb := &countingBatches{api: tr.client, refuse: "refuse-me"}
	tr.client = cb
	var msgs []*transport.Message
	want := map[string][]string{}
	for i := range 25 {
		q := qa
		if i >= 12 && i < 15 {
			q = qb
		}
		body := fmt.Sprintf(`{"job":"urn:babel:test:confirm","data":{"n":%d}}`, i)
		switch i {
		case 5:
			body = `{"job":"urn:babel:test:confirm","data":{"pad":"` + strings.Repeat("x", 5000) + `"}}`
		case 18:
			body = `{"job":"urn:babel:test:confirm","data":{"refuse-me":true}}`
		default:
			want[q] = append(want[q], body)
		}
		msgs = append(msgs, &transport.Message{Queue: q, Body: []byte(body)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := tr.PublishConfirmed(ctx, msgs)
	var be *transport.BatchError
	if !errors.As(err, &be) || !slices.Equal(be.Failed(), []int{5, 18}) {
		t.Fatalf("PublishConfirmed: %v, want a BatchError failing indexes 5 and 18", err)
	}
	var ee *EntryError
	if !errors.Is(be.Errs[5], transport.ErrTooLarge) || !errors.As(be.Errs[18], &ee) || ee.Code != "InternalError" {
		t.Fatalf("errors %v / %v, want ErrTooLarge and SQS's refusal", be.Errs[5], be.Errs[18])
	}
	// Runs: qa 0-11 without 5 (11 messages: 10 + 1), qb 12-14, qa 15-24 (10).
	if got := cb.calls.Load(); got != 4 {
		t.Errorf("%d SendMessageBatch calls, want 4", got)
	}
	if got := cb.entries.Load(); got != 24 {
		t.Errorf("%d entries sent, want 24", got)
	}
	for q, bodies := range want {
		var got []string
		for len(got) < len(bodies) {
			ms := rawReceive(t, admin, q, len(bodies)-len(got))
			if len(ms) == 0 {
				break
			}
			for _, m := range ms {
				got = append(got, *m.Body)
			}
		}
		slices.Sort(got) // a standard queue keeps no order
		slices.Sort(bodies)
		if !slices.Equal(got, bodies) {
			t.Errorf("queue %s holds\n%q\nwant\n%q", q, got, bodies)
		}
	}
}

// TestPublishConfirmedBrokerGone: with ElasticMQ unreachable, every message of the batch
// is reported: the first run's with the cause, the rest not attempted. None is lost
// silently.
func TestPublishConfirmedBrokerGone(t *testing.T) {
	t.Parallel()
	tr, p := openProxied(t, "")
	q := transporttest.UniqueName("bqconfirm")
	deleteQueueLater(t, tr, q)
	queueURL(t, tr, q)
	p.Down()
	defer p.Up()
	var msgs []*transport.Message
	for i := range 15 {
		msgs = append(msgs, &transport.Message{Queue: q, Body: []byte(fmt.Sprintf(`{"job":"urn:babel:test:confirm","data":{"n":%d}}`, i))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := tr.PublishConfirmed(ctx, msgs)
	var be *transport.BatchError
	if !errors.As(err, &be) || len(be.Failed()) != 15 {
		t.Fatalf("PublishConfirmed with the broker gone: %v, want all 15 reported", err)
	}
	for i, e := range be.Errs {
		if i >= 10 && !errors.Is(e, transport.ErrNotAttempted) {
			t.Errorf("message %d: %v, want ErrNotAttempted", i, e)
		}
		if i < 10 && errors.Is(e, transport.ErrNotAttempted) {
			t.Errorf("message %d: %v, want the call's cause", i, e)
		}
	}
}
