package servicebus

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/settle"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// asbBlock is the manifest's "asb" block.
type asbBlock struct {
	PropertyProjection struct {
		EnvelopeFile string `json:"envelope_file"`
		Message      struct {
			Subject       string `json:"subject"`
			CorrelationID string `json:"correlation_id"`
			MessageID     string `json:"message_id"`
			ContentType   string `json:"content_type"`
		} `json:"message"`
		ApplicationProperties map[string]json.RawMessage `json:"application_properties"`
	} `json:"property_projection"`
	AttemptsReconciliation struct {
		Cases []struct {
			Name             string `json:"name"`
			BodyAttempts     int    `json:"body_attempts"`
			DeliveryCount    uint32 `json:"delivery_count"`
			ExpectedAttempts int    `json:"expected_attempts"`
		} `json:"cases"`
	} `json:"attempts_reconciliation"`
}

// loadASB reads the manifest's "asb" block and the envelope fixture it names.
func loadASB(t *testing.T) (asbBlock, []byte) {
	t.Helper()
	var m asbBlock
	dir := transporttest.ManifestBlock(t, "asb", &m)
	if len(m.AttemptsReconciliation.Cases) == 0 || m.PropertyProjection.EnvelopeFile == "" {
		t.Fatal("manifest.json has no usable asb block")
	}
	return m, transporttest.Fixture(t, dir, m.PropertyProjection.EnvelopeFile)
}

// checkProjection asserts the manifest's native fields and typed application
// properties on an SDK message. Numbers must be AMQP numbers (integers), not strings.
func checkProjection(t *testing.T, blk asbBlock, m *azservicebus.Message) {
	t.Helper()
	want := blk.PropertyProjection.Message
	str := func(name string, p *string, w string) {
		t.Helper()
		if p == nil || *p != w {
			t.Errorf("%s = %v, want %q", name, deref(p), w)
		}
	}
	str("Subject", m.Subject, want.Subject)
	str("CorrelationID", m.CorrelationID, want.CorrelationID)
	str("MessageID", m.MessageID, want.MessageID)
	str("ContentType", m.ContentType, want.ContentType)
	for name, rawWant := range blk.PropertyProjection.ApplicationProperties {
		got, ok := m.ApplicationProperties[name]
		if !ok {
			t.Errorf("application property %q missing (have %v)", name, m.ApplicationProperties)
			continue
		}
		var w any
		dec := json.NewDecoder(bytes.NewReader(rawWant))
		dec.UseNumber()
		if err := dec.Decode(&w); err != nil {
			t.Fatal(err)
		}
		switch w := w.(type) {
		case json.Number:
			wi, err := w.Int64()
			if err != nil {
				t.Fatalf("manifest %q: %v", name, err)
			}
			gi, isInt := asInt64(got)
			if !isInt || gi != wi {
				t.Errorf("application property %q = %#v (%T), want the AMQP integer %d", name, got, got, wi)
			}
		case string:
			if s, ok := got.(string); !ok || s != w {
				t.Errorf("application property %q = %#v (%T), want the string %q", name, got, got, w)
			}
		default:
			t.Fatalf("manifest %q: unexpected JSON type %T", name, w)
		}
	}
}

func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	}
	return 0, false
}

func deref(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// wireRoundTrip sends the application properties and body of m through the AMQP 1.0
// encoding the SDK puts on the wire (go-amqp's marshal/unmarshal) and returns what a
// receiver decodes, as a ReceivedMessage holding them.
func wireRoundTrip(t *testing.T, m *azservicebus.Message, deliveryCount uint32) *azservicebus.ReceivedMessage {
	t.Helper()
	am := amqp.NewMessage(m.Body)
	am.ApplicationProperties = m.ApplicationProperties
	am.Properties = &amqp.MessageProperties{Subject: m.Subject, ContentType: m.ContentType}
	if m.MessageID != nil {
		am.Properties.MessageID = *m.MessageID
	}
	if m.CorrelationID != nil {
		am.Properties.CorrelationID = *m.CorrelationID
	}
	b, err := am.MarshalBinary()
	if err != nil {
		t.Fatalf("AMQP encoding of the projected message: %v", err)
	}
	var back amqp.Message
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatalf("AMQP decoding: %v", err)
	}
	rm := &azservicebus.ReceivedMessage{
		ApplicationProperties: back.ApplicationProperties,
		Body:                  back.GetData(),
		ContentType:           back.Properties.ContentType,
		Subject:               back.Properties.Subject,
		DeliveryCount:         deliveryCount,
	}
	if id, ok := back.Properties.MessageID.(string); ok {
		rm.MessageID = id
	}
	if id, ok := back.Properties.CorrelationID.(string); ok {
		rm.CorrelationID = &id
	}
	return rm
}

// TestManifestASBProjection: the fixture envelope projects onto the SDK's Message as the
// manifest says, and the typed properties survive the AMQP wire encoding as numbers.
func TestManifestASBProjection(t *testing.T) {
	blk, fixture := loadASB(t)
	env, err := envelope.Decode(fixture)
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	m, err := Project(&transport.Message{Queue: "orders", Body: fixture, Projection: transport.ProjectionOf(env)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	checkProjection(t, blk, m)
	if !bytes.Equal(m.Body, fixture) {
		t.Errorf("body changed by the projection")
	}
	if _, ok := m.ApplicationProperties[PropAttempts]; ok {
		t.Errorf("a first publish (attempts 0) carries %s; absent means zero", PropAttempts)
	}
	if m.ScheduledEnqueueTime != nil || m.PartitionKey != nil {
		t.Errorf("no delay and no key, yet ScheduledEnqueueTime=%v PartitionKey=%v", m.ScheduledEnqueueTime, m.PartitionKey)
	}

	rm := wireRoundTrip(t, m, 1)
	back := rm.Message()
	checkProjection(t, blk, back)
	d := Reconcile("orders", rm)
	if !bytes.Equal(d.Body, fixture) {
		t.Errorf("body after the wire = %q", d.Body)
	}
	if d.SchemaVersion != int64(1) {
		t.Errorf("Delivery.SchemaVersion = %#v, want int64(1)", d.SchemaVersion)
	}
	if ok, shown := settle.GateSchemaVersion(d.SchemaVersion, (&Transport{}).Capabilities().SchemaGateAcceptsInteger); !ok {
		t.Errorf("the runtime's gate rejects our own projection (%s)", shown)
	}
	if len(d.Headers) != 0 {
		t.Errorf("projected properties leaked into Headers: %v", d.Headers)
	}
}

// TestManifestASBProjectionThroughRuntime: a message the runtime re-publishes (an unknown
// URN released) carries the manifest's projection from the envelope it decoded.
func TestManifestASBProjectionThroughRuntime(t *testing.T) {
	blk, fixture := loadASB(t)
	b := newFakeBroker()
	tr := openFake(t, b)
	b.inject("orders", &azservicebus.Message{Body: fixture}, 0)
	a, err := babelqueue.New(tr, babelqueue.WithQueue("orders"), babelqueue.WithUnknownURN(babelqueue.UnknownRelease))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	var released *fakeMsg
	for released == nil && time.Now().Before(deadline) {
		for _, m := range b.waitingMessages("orders") {
			if m.m.Subject != nil { // the injected original has no projection
				released = m
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	_ = a.Close(context.Background())
	if released == nil {
		t.Fatal("the runtime never re-published the released message")
	}
	checkProjection(t, blk, released.m)
	if !bytes.Equal(released.m.Body, fixture) {
		t.Errorf("released body changed:\n got %s\nwant %s", released.m.Body, fixture)
	}
}

// TestManifestASBAttemptsReconciliation runs the manifest's cases through the SDK's
// ReceivedMessage (DeliveryCount as the SDK reports it) and the runtime's rule.
func TestManifestASBAttemptsReconciliation(t *testing.T) {
	blk, fixture := loadASB(t)
	caps := (&Transport{}).Capabilities()
	for _, c := range blk.AttemptsReconciliation.Cases {
		t.Run(c.Name, func(t *testing.T) {
			body, err := envelope.SetAttempts(fixture, c.BodyAttempts)
			if err != nil {
				t.Fatal(err)
			}
			d := Reconcile("orders", &azservicebus.ReceivedMessage{Body: body, DeliveryCount: c.DeliveryCount})
			env, err := envelope.Decode(d.Body)
			if err != nil {
				t.Fatal(err)
			}
			if env.Attempts != c.BodyAttempts {
				t.Fatalf("body attempts = %d, want %d", env.Attempts, c.BodyAttempts)
			}
			got := settle.ReconcileAttempts(caps.Attempts, env.Attempts, true, d)
			if got != c.ExpectedAttempts {
				t.Errorf("body %d, DeliveryCount %d: attempts = %d, want %d (Redeliveries %d)",
					c.BodyAttempts, c.DeliveryCount, got, c.ExpectedAttempts, d.Redeliveries)
			}
		})
	}
}

// TestManifestASBAttemptsEndToEnd: a handler sees max(body, DeliveryCount − 1) for a
// message Service Bus already delivered several times (the fake keeps the count).
func TestManifestASBAttemptsEndToEnd(t *testing.T) {
	blk, fixture := loadASB(t)
	for _, c := range blk.AttemptsReconciliation.Cases {
		if c.DeliveryCount == 0 {
			continue // a broker never hands out a delivery count of zero
		}
		t.Run(c.Name, func(t *testing.T) {
			body, err := envelope.SetAttempts(fixture, c.BodyAttempts)
			if err != nil {
				t.Fatal(err)
			}
			b := newFakeBroker()
			b.maxDeliveryCount = 100
			b.inject("orders", &azservicebus.Message{Body: body}, c.DeliveryCount-1)
			a, err := babelqueue.New(openFake(t, b), babelqueue.WithQueue("orders"), babelqueue.WithMaxAttempts(1000))
			if err != nil {
				t.Fatal(err)
			}
			seen := make(chan int, 1)
			a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
				seen <- m.Attempts
				return nil
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			select {
			case got := <-seen:
				if got != c.ExpectedAttempts {
					t.Errorf("handler saw attempts %d, want %d", got, c.ExpectedAttempts)
				}
			case <-time.After(10 * time.Second):
				t.Error("handler never ran")
			}
			cancel()
			<-done
			_ = a.Close(context.Background())
		})
	}
}

func TestReconcileUsesOnlyTheSDKFields(t *testing.T) {
	// The ReceivedMessage the SDK builds from a received AMQP message, copied into a
	// Message (what a redrive would send), projects back to the same properties.
	_, fixture := loadASB(t)
	env, _ := envelope.Decode(fixture)
	m, err := Project(&transport.Message{Queue: "q", Body: fixture, Projection: transport.ProjectionOf(env), Attempts: 2,
		Headers: map[string]string{"traceparent": "00-abc-01"}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rm := wireRoundTrip(t, m, 4)
	if !reflect.DeepEqual(rm.Message().ApplicationProperties, rm.ApplicationProperties) {
		t.Fatal("ReceivedMessage.Message lost properties")
	}
	d := Reconcile("q", rm)
	if !d.HasAttemptsHeader || d.AttemptsHeader != 2 || d.Redeliveries != 3 {
		t.Errorf("attempts header %v/%d, redeliveries %d; want 2 and 3", d.HasAttemptsHeader, d.AttemptsHeader, d.Redeliveries)
	}
	if !reflect.DeepEqual(d.Headers, map[string]string{"traceparent": "00-abc-01"}) {
		t.Errorf("Headers = %v", d.Headers)
	}
}
