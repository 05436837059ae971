package sqs

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

type sqsManifest struct {
	SQS struct {
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
	} `json:"sqs"`
}

func loadManifest(t *testing.T) (sqsManifest, string) {
	t.Helper()
	dir := conformanceDir(t)
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatalf("conformance manifest: %v (set BQ_CONFORMANCE_DIR)", err)
	}
	var m sqsManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.SQS.AttributeProjection.MessageAttributes) == 0 || len(m.SQS.AttemptsReconciliation.Cases) == 0 {
		t.Fatal("manifest has no sqs block")
	}
	return m, dir
}

// projectionOf reads the projected fields of an envelope the way the runtime does.
func projectionOf(t *testing.T, body []byte) transport.Projection {
	t.Helper()
	var env struct {
		Job     string `json:"job"`
		TraceID string `json:"trace_id"`
		Meta    struct {
			ID            string `json:"id"`
			Lang          string `json:"lang"`
			SchemaVersion int    `json:"schema_version"`
			CreatedAt     int64  `json:"created_at"`
		} `json:"meta"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	return transport.Projection{URN: env.Job, TraceID: env.TraceID, MessageID: env.Meta.ID, Lang: env.Meta.Lang,
		SchemaVersion: env.Meta.SchemaVersion, CreatedAt: env.Meta.CreatedAt}
}

// TestManifestAttributeProjection publishes the manifest's envelope and reads the
// message back with the raw client: the MessageAttributes are exactly the manifest's.
func TestManifestAttributeProjection(t *testing.T) {
	m, dir := loadManifest(t)
	want := m.SQS.AttributeProjection.MessageAttributes
	body, err := os.ReadFile(filepath.Join(dir, m.SQS.AttributeProjection.EnvelopeFile))
	if err != nil {
		t.Fatal(err)
	}
	tr := openTest(t)
	q := transporttest.UniqueName("bqmanifest")
	deleteQueueLater(t, tr, q)
	ctx := context.Background()
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body, Projection: projectionOf(t, body)}); err != nil {
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
	for _, c := range m.SQS.AttemptsReconciliation.Cases {
		t.Run(c.Name, func(t *testing.T) {
			msg := types.Message{Body: aws.String(`{"attempts":` + strconv.Itoa(c.BodyAttempts) + `}`), Attributes: map[string]string{}}
			if c.ApproximateReceiveCount != nil {
				msg.Attributes["ApproximateReceiveCount"] = *c.ApproximateReceiveCount
			}
			var d transport.Delivery
			readDelivery(&d, &msg)
			if got := transport.ReconcileAttempts(caps.Attempts, c.BodyAttempts, true, &d); got != c.ExpectedAttempts {
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
	for _, c := range m.SQS.AttemptsReconciliation.Cases {
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
					if got := transport.ReconcileAttempts(caps.Attempts, c.BodyAttempts, true, d); got != c.ExpectedAttempts {
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
