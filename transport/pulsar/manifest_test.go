package pulsar_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/settle"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/pulsar"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// pulsarBlock is the manifest's "pulsar" block.
type pulsarBlock struct {
	PropertyProjection struct {
		EnvelopeFile string            `json:"envelope_file"`
		Properties   map[string]string `json:"properties"`
	} `json:"property_projection"`
	AttemptsReconciliation struct {
		Cases []struct {
			Name             string `json:"name"`
			BodyAttempts     int    `json:"body_attempts"`
			RedeliveryCount  int    `json:"redelivery_count"`
			ExpectedAttempts int    `json:"expected_attempts"`
		} `json:"cases"`
	} `json:"attempts_reconciliation"`
}

func loadBlock(t *testing.T) (pulsarBlock, string) {
	t.Helper()
	var m pulsarBlock
	dir := transporttest.ManifestBlock(t, "pulsar", &m)
	if len(m.AttemptsReconciliation.Cases) == 0 || len(m.PropertyProjection.Properties) == 0 {
		t.Fatal("manifest.json has no usable pulsar block")
	}
	return m, dir
}

// rawClient is a plain pulsar-client-go client on the test broker, to read and write
// behind the transport's back.
func rawClient(t testing.TB) pc.Client {
	t.Helper()
	c, err := pc.NewClient(pc.ClientOptions{URL: brokerURL(t), Logger: silentPulsarLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func rawSubscribe(t testing.TB, c pc.Client, topic string) pc.Consumer {
	t.Helper()
	cons, err := c.Subscribe(pc.ConsumerOptions{
		Topic: topic, SubscriptionName: "raw-reader", Type: pc.Shared,
		SubscriptionInitialPosition: pc.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cons.Close)
	return cons
}

func rawReceive(t testing.TB, cons pc.Consumer) pc.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := cons.Receive(ctx)
	if err != nil {
		t.Fatalf("raw receive: %v", err)
	}
	_ = cons.Ack(m)
	return m
}

// TestManifestProjection publishes the manifest's envelope through the transport and
// reads it back with the raw client: the payload is byte-identical and the properties
// are exactly the manifest's.
func TestManifestProjection(t *testing.T) {
	block, dir := loadBlock(t)
	body, err := os.ReadFile(filepath.Join(dir, block.PropertyProjection.EnvelopeFile))
	if err != nil {
		t.Fatal(err)
	}
	proj, attempts := transporttest.FixtureProjection(t, body)
	tr := openTransport(t, "")
	q := transporttest.UniqueName("bqtest-manifest")
	ctx := context.Background()
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body, Attempts: attempts, Projection: proj}); err != nil {
		t.Fatal(err)
	}
	m := rawReceive(t, rawSubscribe(t, rawClient(t), q))
	if string(m.Payload()) != string(body) {
		t.Errorf("payload changed:\n got %q\nwant %q", m.Payload(), body)
	}
	got := m.Properties()
	for k, v := range block.PropertyProjection.Properties {
		if got[k] != v {
			t.Errorf("property %q = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(block.PropertyProjection.Properties) {
		t.Errorf("properties = %v, want exactly %v", got, block.PropertyProjection.Properties)
	}
	if m.Key() != "" {
		t.Errorf("a message without a key got key %q", m.Key())
	}
	if m.EventTime().UnixMilli() != proj.CreatedAt {
		t.Errorf("event time = %d, want meta.created_at %d", m.EventTime().UnixMilli(), proj.CreatedAt)
	}
}

// TestManifestAttemptsReconciliation runs each reconciliation case on the broker: a
// message whose body holds body_attempts is negatively acknowledged redelivery_count
// times, and the delivery then reports that count and reconciles to the expected
// attempts.
func TestManifestAttemptsReconciliation(t *testing.T) {
	block, dir := loadBlock(t)
	fixture, err := os.ReadFile(filepath.Join(dir, block.PropertyProjection.EnvelopeFile))
	if err != nil {
		t.Fatal(err)
	}
	tr := openTransport(t, "", pulsar.WithNackRedeliveryDelay(100*time.Millisecond))
	for _, c := range block.AttemptsReconciliation.Cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			var env map[string]any
			if err := json.Unmarshal(fixture, &env); err != nil {
				t.Fatal(err)
			}
			env["attempts"] = c.BodyAttempts
			body, _ := json.Marshal(env)
			proj, _ := transporttest.FixtureProjection(t, body)
			q := transporttest.UniqueName("bqtest-reconcile")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body, Attempts: c.BodyAttempts, Projection: proj}); err != nil {
				t.Fatal(err)
			}
			cons, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cons.Close(context.Background()) }()
			var d *transport.Delivery
			for i := 0; ; i++ {
				d, err = cons.Receive(ctx)
				if err != nil {
					t.Fatalf("delivery %d: %v", i, err)
				}
				if i == c.RedeliveryCount {
					break
				}
				if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
					t.Fatal(err)
				}
			}
			if d.Redeliveries != c.RedeliveryCount {
				t.Errorf("Redeliveries = %d after %d rewinds", d.Redeliveries, c.RedeliveryCount)
			}
			if !d.HasAttemptsHeader || d.AttemptsHeader != c.BodyAttempts {
				t.Errorf("attempts header = %d (present %v), want %d", d.AttemptsHeader, d.HasAttemptsHeader, c.BodyAttempts)
			}
			var got struct {
				Attempts int `json:"attempts"`
			}
			if err := json.Unmarshal(d.Body, &got); err != nil {
				t.Fatal(err)
			}
			rule := tr.Capabilities().Attempts
			if n := settle.ReconcileAttempts(rule, got.Attempts, true, d); n != c.ExpectedAttempts {
				t.Errorf("reconciled attempts = %d, want %d", n, c.ExpectedAttempts)
			}
			if err := cons.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
