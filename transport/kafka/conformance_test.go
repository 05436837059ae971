package kafka_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/settle"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// kafkaBlock is the manifest's "kafka" block.
type kafkaBlock struct {
	PropertyProjection struct {
		EnvelopeFile string            `json:"envelope_file"`
		Headers      map[string]string `json:"headers"`
	} `json:"property_projection"`
	AttemptsReconciliation struct {
		Cases []struct {
			Name             string `json:"name"`
			BodyAttempts     int    `json:"body_attempts"`
			HeaderAttempts   *int   `json:"header_attempts"`
			ExpectedAttempts int    `json:"expected_attempts"`
		} `json:"cases"`
	} `json:"attempts_reconciliation"`
}

func loadKafkaBlock(t testing.TB) (kafkaBlock, string) {
	t.Helper()
	var m kafkaBlock
	dir := transporttest.ManifestBlock(t, "kafka", &m)
	if len(m.PropertyProjection.Headers) == 0 || len(m.AttemptsReconciliation.Cases) == 0 {
		t.Fatal("manifest kafka block has no headers or no reconciliation cases")
	}
	return m, dir
}

// TestManifestProjection publishes the manifest's envelope and checks the record another
// client reads: the value byte for byte, exactly the manifest's headers, and the
// timestamp equal to meta.created_at.
func TestManifestProjection(t *testing.T) {
	block, dir := loadKafkaBlock(t)
	body, err := os.ReadFile(filepath.Join(dir, block.PropertyProjection.EnvelopeFile))
	if err != nil {
		t.Fatal(err)
	}
	proj, attempts := transporttest.FixtureProjection(t, body)
	tr := openKafka(t)
	q := newTopic(t, "bqtest-manifest")
	publishOK(t, tr, &transport.Message{Queue: q, Body: body, Attempts: attempts, Projection: proj})
	r := readTopic(t, q, 1)[0]
	if !bytes.Equal(r.Value, body) {
		t.Errorf("record value is not the envelope byte for byte:\n got %q\nwant %q", r.Value, body)
	}
	got := map[string]string{}
	for _, h := range r.Headers {
		if _, dup := got[h.Key]; dup {
			t.Errorf("header %s written twice", h.Key)
		}
		got[h.Key] = string(h.Value)
	}
	for k, v := range block.PropertyProjection.Headers {
		if got[k] != v {
			t.Errorf("header %s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(block.PropertyProjection.Headers) {
		t.Errorf("record headers = %v, want exactly %v", got, block.PropertyProjection.Headers)
	}
	if r.Timestamp.UnixMilli() != proj.CreatedAt {
		t.Errorf("record timestamp = %d, want meta.created_at %d", r.Timestamp.UnixMilli(), proj.CreatedAt)
	}
	// The consumer sees none of the projected headers as out-of-band headers.
	c := consumeOn(t, tr, q, 1)
	d := transporttest.Receive(t, c, 30*time.Second)
	if len(d.Headers) != 0 {
		t.Errorf("Delivery.Headers = %v, want none (all headers are the binding's own)", d.Headers)
	}
	if d.SchemaVersion != block.PropertyProjection.Headers["bq-schema-version"] {
		t.Errorf("Delivery.SchemaVersion = %#v", d.SchemaVersion)
	}
	settleOK(t, c, d, transport.Settlement{Outcome: transport.Ack})
}

// TestManifestAttemptsReconciliation writes each case of the manifest as a record (body
// attempts, and the bq-attempts header unless it is null), consumes it through the
// transport, and reconciles the counter with the transport's own rule.
func TestManifestAttemptsReconciliation(t *testing.T) {
	block, dir := loadKafkaBlock(t)
	tmpl, err := os.ReadFile(filepath.Join(dir, block.PropertyProjection.EnvelopeFile))
	if err != nil {
		t.Fatal(err)
	}
	tr := openKafka(t)
	q := newTopic(t, "bqtest-reconcile")
	cases := block.AttemptsReconciliation.Cases
	var recs []*kgo.Record
	for _, c := range cases {
		var env map[string]any
		if err := json.Unmarshal(tmpl, &env); err != nil {
			t.Fatal(err)
		}
		env["attempts"] = c.BodyAttempts
		env["case"] = c.Name
		body, _ := json.Marshal(env)
		r := &kgo.Record{Topic: q, Value: body}
		if c.HeaderAttempts != nil {
			r.Headers = []kgo.RecordHeader{{Key: "bq-attempts", Value: []byte(strconv.Itoa(*c.HeaderAttempts))}}
		}
		recs = append(recs, r)
	}
	produceRaw(t, recs...)
	cons := consumeOn(t, tr, q, len(cases))
	rule := tr.Capabilities().Attempts
	for range cases {
		d := transporttest.Receive(t, cons, 30*time.Second)
		var env struct {
			Case     string `json:"case"`
			Attempts int    `json:"attempts"`
		}
		if err := json.Unmarshal(d.Body, &env); err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			if c.Name != env.Case {
				continue
			}
			if got := settle.ReconcileAttempts(rule, env.Attempts, true, d); got != c.ExpectedAttempts {
				t.Errorf("%s: attempts = %d, want %d (header present %v)", c.Name, got, c.ExpectedAttempts, d.HasAttemptsHeader)
			}
		}
		settleOK(t, cons, d, transport.Settlement{Outcome: transport.Ack})
	}
}
