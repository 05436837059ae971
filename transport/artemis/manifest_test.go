package artemis_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/settle"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/artemis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// artemisBlock is the manifest's "artemis" block.
type artemisBlock struct {
	PropertyProjection struct {
		EnvelopeFile      string            `json:"envelope_file"`
		JMSTypeAnnotation string            `json:"jms_type_annotation"`
		JMSType           string            `json:"jms_type"`
		CorrelationID     string            `json:"correlation_id"`
		Properties        map[string]string `json:"properties"`
	} `json:"property_projection"`
	AttemptsReconciliation struct {
		Cases []struct {
			Name             string `json:"name"`
			BodyAttempts     int    `json:"body_attempts"`
			DeliveryCount    int    `json:"delivery_count"`
			ExpectedAttempts int    `json:"expected_attempts"`
		} `json:"cases"`
	} `json:"attempts_reconciliation"`
}

func loadBlock(t *testing.T) (artemisBlock, string) {
	t.Helper()
	var m artemisBlock
	dir := transporttest.ManifestBlock(t, "artemis", &m)
	if len(m.AttemptsReconciliation.Cases) == 0 || len(m.PropertyProjection.Properties) == 0 {
		t.Fatal("manifest.json has no usable artemis block")
	}
	return m, dir
}

// rawReceive reads one message from queue with plain go-amqp, accepting it, so a test
// sees exactly what Artemis stored.
func rawReceive(t *testing.T, queue string) *amqp.Message {
	t.Helper()
	conn := rawConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sess.NewReceiver(ctx, queue, &amqp.ReceiverOptions{SourceCapabilities: []string{"queue"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(context.Background()) }()
	msg, err := r.Receive(ctx, nil)
	if err != nil {
		t.Fatalf("raw receive from %q: %v", queue, err)
	}
	if err := r.AcceptMessage(ctx, msg); err != nil {
		t.Fatal(err)
	}
	return msg
}

// rawConn dials the test broker with plain go-amqp.
func rawConn(t testing.TB) *amqp.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := artemis.DialURL(ctx, brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// The manifest's property_projection: what Go produces is what a JMS peer reads, as
// Artemis stored it.
func TestManifestPropertyProjection(t *testing.T) {
	block, dir := loadBlock(t)
	pp := block.PropertyProjection
	body, err := os.ReadFile(filepath.Join(dir, pp.EnvelopeFile))
	if err != nil {
		t.Fatal(err)
	}
	proj, attempts := transporttest.FixtureProjection(t, body)
	tr := openTransport(t)
	q := transporttest.UniqueName("bqtest-manifest")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body, Attempts: attempts, Projection: proj}); err != nil {
		t.Fatal(err)
	}
	msg := rawReceive(t, q)

	// The envelope rides as an AMQP string value, as the Python SDK 1.24.0 sends and
	// reads it (see TestInteropPythonWireShape), byte for byte.
	if s, ok := msg.Value.(string); !ok || s != string(body) || len(msg.Data) != 0 {
		t.Errorf("body is not the envelope bytes in one string value section: data=%q value=%#v", msg.Data, msg.Value)
	}
	if got := msg.Annotations[pp.JMSTypeAnnotation]; got != pp.JMSType {
		t.Errorf("annotation %s = %#v, want %q", pp.JMSTypeAnnotation, got, pp.JMSType)
	}
	if msg.Properties == nil {
		t.Fatal("no properties section")
	}
	if got := msg.Properties.CorrelationID; got != pp.CorrelationID {
		t.Errorf("correlation-id = %#v, want the string %q", got, pp.CorrelationID)
	}
	if got := msg.Properties.MessageID; got != proj.MessageID {
		t.Errorf("message-id = %#v, want the string %q (meta.id)", got, proj.MessageID)
	}
	if msg.Properties.CreationTime == nil || msg.Properties.CreationTime.UnixMilli() != proj.CreatedAt {
		t.Errorf("creation-time = %v, want %d (meta.created_at)", msg.Properties.CreationTime, proj.CreatedAt)
	}
	for k, want := range pp.Properties {
		got, ok := msg.ApplicationProperties[k]
		if !ok {
			t.Errorf("application property %s missing (all: %v)", k, msg.ApplicationProperties)
			continue
		}
		if s, isString := got.(string); !isString || s != want {
			t.Errorf("application property %s = %#v (%T), want the string %q", k, got, got, want)
		}
	}
	// URN, trace_id and message id ride the JMS slots, not bq_ properties.
	for _, k := range []string{"bq_job", "bq_trace_id", "bq_message_id", "bq-schema-version"} {
		if _, ok := msg.ApplicationProperties[k]; ok {
			t.Errorf("unexpected application property %s", k)
		}
	}
}

// The manifest's attempts_reconciliation cases, run on the real broker: the delivery
// count is produced by rewinding the delivery that many times, and the 0-based AMQP
// delivery-count maps to Redeliveries without a -1.
func TestManifestAttemptsReconciliation(t *testing.T) {
	block, _ := loadBlock(t)
	tr := openTransport(t)
	if tr.Capabilities().Attempts != transport.AttemptsMaxNative {
		t.Fatalf("Capabilities().Attempts = %v, want AttemptsMaxNative", tr.Capabilities().Attempts)
	}
	for _, tc := range block.AttemptsReconciliation.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			q := transporttest.UniqueName("bqtest-attempts")
			body := []byte(fmt.Sprintf(`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":%d}`, tc.BodyAttempts))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body, Attempts: tc.BodyAttempts}); err != nil {
				t.Fatal(err)
			}
			c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close(context.Background()) }()
			var d *transport.Delivery
			for i := 0; ; i++ {
				d, err = c.Receive(ctx)
				if err != nil {
					t.Fatalf("receive %d: %v", i, err)
				}
				if d.Redeliveries != i {
					t.Fatalf("delivery %d: Redeliveries = %d, want %d (AMQP delivery-count, 0-based)", i, d.Redeliveries, i)
				}
				if i == tc.DeliveryCount {
					break
				}
				if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
					t.Fatal(err)
				}
			}
			if !d.HasAttemptsHeader || d.AttemptsHeader != tc.BodyAttempts {
				t.Errorf("bq_attempts header = %d (present %v), want %d", d.AttemptsHeader, d.HasAttemptsHeader, tc.BodyAttempts)
			}
			if got := settle.ReconcileAttempts(tr.Capabilities().Attempts, tc.BodyAttempts, true, d); got != tc.ExpectedAttempts {
				t.Errorf("attempts = %d, want %d", got, tc.ExpectedAttempts)
			}
			if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
