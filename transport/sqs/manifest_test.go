package sqs

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/settle"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// sqsBlock is the manifest's "sqs" block.
type sqsBlock struct {
	AttributeProjection struct {
		EnvelopeFile      string `json:"envelope_file"`
		MessageAttributes map[string]struct {
			DataType    string `json:"DataType"`
			StringValue string `json:"StringValue"`
		} `json:"message_attributes"`
	} `json:"attribute_projection"`
	AttemptsReconciliation struct {
		Cases []struct {
			Name                    string  `json:"name"`
			BodyAttempts            int     `json:"body_attempts"`
			ApproximateReceiveCount *string `json:"approximate_receive_count"`
			ExpectedAttempts        int     `json:"expected_attempts"`
		} `json:"cases"`
	} `json:"attempts_reconciliation"`
}

func loadManifest(t *testing.T) (sqsBlock, string) {
	t.Helper()
	var m sqsBlock
	dir := transporttest.ManifestBlock(t, "sqs", &m)
	if len(m.AttributeProjection.MessageAttributes) == 0 || len(m.AttemptsReconciliation.Cases) == 0 {
		t.Fatal("manifest has no usable sqs block")
	}
	return m, dir
}

// TestManifestAttributeProjection publishes the manifest's envelope and reads the
// message back with the raw client: the MessageAttributes are exactly the manifest's.
func TestManifestAttributeProjection(t *testing.T) {
	m, dir := loadManifest(t)
	want := m.AttributeProjection.MessageAttributes
	body := transporttest.Fixture(t, dir, m.AttributeProjection.EnvelopeFile)
	tr := openTest(t)
	q := transporttest.UniqueName("bqmanifest")
	deleteQueueLater(t, tr, q)
	ctx := context.Background()
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body, Projection: projection(t, body)}); err != nil {
		t.Fatal(err)
	}
	out, err := rawClient(t, tr).ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
		QueueUrl: aws.String(queueURL(t, tr, q)), MessageAttributeNames: []string{"All"}, WaitTimeSeconds: 5,
	})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("raw receive: %v (%d messages)", err, len(out.Messages))
	}
	got := out.Messages[0]
	if aws.ToString(got.Body) != string(body) {
		t.Errorf("body changed:\n got %q\nwant %q", aws.ToString(got.Body), body)
	}
	if len(got.MessageAttributes) != len(want) {
		t.Errorf("%d attributes, want the manifest's %d: %v", len(got.MessageAttributes), len(want), got.MessageAttributes)
	}
	for name, w := range want {
		a, ok := got.MessageAttributes[name]
		if !ok {
			t.Errorf("attribute %s missing", name)
			continue
		}
		if aws.ToString(a.DataType) != w.DataType || aws.ToString(a.StringValue) != w.StringValue {
			t.Errorf("attribute %s = %s %q, want %s %q", name, aws.ToString(a.DataType), aws.ToString(a.StringValue), w.DataType, w.StringValue)
		}
	}
}

// TestManifestAttemptsReconciliation runs every reconciliation case through the
// delivery the transport builds and the runtime's rule.
func TestManifestAttemptsReconciliation(t *testing.T) {
	m, _ := loadManifest(t)
	caps := (&Transport{}).Capabilities()
	for _, c := range m.AttemptsReconciliation.Cases {
		t.Run(c.Name, func(t *testing.T) {
			msg := types.Message{Body: aws.String(`{"attempts":` + strconv.Itoa(c.BodyAttempts) + `}`), Attributes: map[string]string{}}
			if c.ApproximateReceiveCount != nil {
				msg.Attributes["ApproximateReceiveCount"] = *c.ApproximateReceiveCount
			}
			var d transport.Delivery
			readDelivery(&d, &msg)
			if got := settle.ReconcileAttempts(caps.Attempts, c.BodyAttempts, true, &d); got != c.ExpectedAttempts {
				t.Errorf("attempts = %d, want %d (Redeliveries %d)", got, c.ExpectedAttempts, d.Redeliveries)
			}
		})
	}
}

// TestManifestReconciliationOnBroker drives the numeric cases through ElasticMQ: the
// receive count comes from real rewinds, not from a hand-built message.
func TestManifestReconciliationOnBroker(t *testing.T) {
	m, _ := loadManifest(t)
	tr := openTest(t)
	caps := tr.Capabilities()
	for _, c := range m.AttemptsReconciliation.Cases {
		if c.ApproximateReceiveCount == nil {
			continue
		}
		n, err := strconv.Atoi(*c.ApproximateReceiveCount)
		if err != nil {
			continue // garbage counts cannot come from a real broker
		}
		t.Run(c.Name, func(t *testing.T) {
			q := transporttest.UniqueName("bqreconcile")
			deleteQueueLater(t, tr, q)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			body := []byte(`{"job":"urn:babel:test:r","attempts":` + strconv.Itoa(c.BodyAttempts) + `}`)
			if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body}); err != nil {
				t.Fatal(err)
			}
			cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close(ctx)
			for i := 1; ; i++ {
				d, err := cons.Receive(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if i == n {
					if got := settle.ReconcileAttempts(caps.Attempts, c.BodyAttempts, true, d); got != c.ExpectedAttempts {
						t.Errorf("after %d receives attempts = %d, want %d", n, got, c.ExpectedAttempts)
					}
					if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
						t.Fatal(err)
					}
					return
				}
				if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// projection is the projection the runtime publishes body with.
func projection(t *testing.T, body []byte) transport.Projection {
	p, _ := transporttest.FixtureProjection(t, body)
	return p
}
