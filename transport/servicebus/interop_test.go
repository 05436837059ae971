package servicebus

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/settle"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// The interop tests put the Python SDK (babelqueue 1.24.0, AsbTransport on
// azure-servicebus) on the other side of the AMQP 1.0 encoding both SDKs send to Service
// Bus: Python's own encoder produces the bytes Go decodes, and Go's projection, encoded
// by go-amqp (the SDK's AMQP stack), is what Python's transport pops. No namespace is
// contacted by either side (scripts/py/servicebus_wire.py uses a fake client).

// toWire encodes an SDK message the way the SDK puts it on a link (the fields the
// binding uses), with the header's 0-based delivery count.
func toWire(t *testing.T, m *azservicebus.Message, deliveryCount uint32) []byte {
	t.Helper()
	am := amqp.NewMessage(m.Body)
	am.Header = &amqp.MessageHeader{Durable: true}
	if deliveryCount > 0 {
		am.Header.DeliveryCount = deliveryCount - 1
	}
	am.Properties = &amqp.MessageProperties{Subject: m.Subject, ContentType: m.ContentType}
	if m.MessageID != nil {
		am.Properties.MessageID = *m.MessageID
	}
	if m.CorrelationID != nil {
		am.Properties.CorrelationID = *m.CorrelationID
	}
	am.ApplicationProperties = m.ApplicationProperties
	if m.PartitionKey != nil {
		am.Annotations = amqp.Annotations{"x-opt-partition-key": *m.PartitionKey}
	}
	b, err := am.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fromWire decodes AMQP bytes into the SDK's Message as a receiver would see them.
func fromWire(t *testing.T, b []byte) *azservicebus.Message {
	t.Helper()
	var am amqp.Message
	if err := am.UnmarshalBinary(b); err != nil {
		t.Fatalf("decoding the Python SDK's AMQP message: %v", err)
	}
	m := &azservicebus.Message{Body: am.GetData(), ApplicationProperties: am.ApplicationProperties}
	if p := am.Properties; p != nil {
		m.Subject, m.ContentType = p.Subject, p.ContentType
		if id, ok := p.MessageID.(string); ok {
			m.MessageID = &id
		}
		if id, ok := p.CorrelationID.(string); ok {
			m.CorrelationID = &id
		}
	}
	return m
}

// TestInteropPythonToGo: the fixture published by the Python SDK decodes to the same
// native fields and the same AMQP types as the Go projection, passes the Go schema gate
// and reaches a Go handler unchanged.
func TestInteropPythonToGo(t *testing.T) {
	_, fixture := loadASB(t)
	fixturePath := filepath.Join(transporttest.ConformanceDir(t), "fixtures", "order-created.json")
	out := pyinterop.Run(t, 60*time.Second, nil, pyinterop.Script(t, "servicebus_wire.py"), "produce", fixturePath)
	wire, err := hex.DecodeString(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("python output is not one hex line: %q", out)
	}
	py := fromWire(t, wire)

	env, err := envelope.Decode(fixture)
	if err != nil {
		t.Fatal(err)
	}
	goMsg, err := Project(&transport.Message{Queue: "orders", Body: fixture, Projection: transport.ProjectionOf(env)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	goBack := fromWire(t, toWire(t, goMsg, 1))
	for name, pv := range py.ApplicationProperties {
		gv, ok := goBack.ApplicationProperties[name]
		if !ok {
			t.Errorf("Python sends %q (%T %v), Go does not", name, pv, pv)
			continue
		}
		if reflect.TypeOf(gv) != reflect.TypeOf(pv) || gv != pv {
			t.Errorf("%q: Python sends %T(%v), Go sends %T(%v)", name, pv, pv, gv, gv)
		}
	}
	for name := range goBack.ApplicationProperties {
		if _, ok := py.ApplicationProperties[name]; !ok {
			t.Errorf("Go sends %q, Python does not", name)
		}
	}
	for _, f := range []struct {
		name    string
		py, gov *string
	}{{"Subject", py.Subject, goBack.Subject}, {"CorrelationID", py.CorrelationID, goBack.CorrelationID},
		{"MessageID", py.MessageID, goBack.MessageID}, {"ContentType", py.ContentType, goBack.ContentType}} {
		if deref(f.py) != deref(f.gov) {
			t.Errorf("%s: Python %v, Go %v", f.name, deref(f.py), deref(f.gov))
		}
	}
	if !bytes.Equal(py.Body, fixture) {
		t.Errorf("Python changed the body")
	}

	// The Python-produced message through the Go runtime.
	b := newFakeBroker()
	b.inject("orders", py, 0)
	a := runApp(t, openFake(t, b))
	got := make(chan *babelqueue.Message, 1)
	a.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		got <- m
		return nil
	})
	stop := start(t, a)
	select {
	case m := <-got:
		if m.Envelope.Meta.Lang != "php" || m.Envelope.TraceID != "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b" || m.Attempts != 0 {
			t.Errorf("Go handler got %+v (attempts %d)", m.Envelope, m.Attempts)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Python-produced message never reached the Go handler")
	}
	stop()
}

type pyPopped struct {
	Body           string            `json:"body"`
	RouteURN       string            `json:"route_urn"`
	NativeAttempts int               `json:"native_attempts"`
	Headers        map[string]string `json:"headers"`
	Key            *string           `json:"key"`
}

// TestInteropGoToPython: messages the Go transport projects are popped by the Python
// SDK's AsbTransport with the same body and the same schema-gate verdict; the two
// differences observed (Python's 0-based delivery count, no headers) are pinned.
func TestInteropGoToPython(t *testing.T) {
	_, fixture := loadASB(t)
	env, err := envelope.Decode(fixture)
	if err != nil {
		t.Fatal(err)
	}
	type tc struct {
		name          string
		msg           *transport.Message
		deliveryCount uint32
		schema        any // overrides bq-schema-version when set
		wantRoute     string
		wantAttempts  int // Go: max(body, DeliveryCount − 1), DeliveryCount = header + 1
		// pyAttempts is the attempts Python writes into the body it pops. Observed with
		// azure-servicebus 7.x: its delivery_count is the raw 0-based AMQP header
		// delivery-count (the Go, .NET and Java SDKs add one), so Python 1.24.0 counts
		// one native redelivery fewer than Go for the same message.
		pyAttempts int
		// pyHeaders: Python 1.24.0's AsbTransport surfaces no out-of-band application
		// properties as headers (observed), where Go does.
		pyHeaders map[string]string
	}
	base := func() *transport.Message {
		return &transport.Message{Queue: "orders", Body: fixture, Projection: transport.ProjectionOf(env)}
	}
	withHeaders := base()
	withHeaders.Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	cases := []tc{
		{name: "first-delivery", msg: base(), deliveryCount: 1},
		{name: "third-delivery", msg: base(), deliveryCount: 3, wantAttempts: 2, pyAttempts: 1},
		{name: "headers", msg: withHeaders, deliveryCount: 1},
		{name: "schema-string-2", msg: base(), deliveryCount: 1, schema: "2", wantRoute: "babelqueue:unsupported-schema-version:2"},
		{name: "schema-string-1", msg: base(), deliveryCount: 1, schema: "1"},
		{name: "schema-long-1", msg: base(), deliveryCount: 1, schema: int64(1)},
	}
	var in strings.Builder
	for _, c := range cases {
		m, err := Project(c.msg, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if c.schema != nil {
			m.ApplicationProperties[PropSchemaVersion] = c.schema
		}
		fmt.Fprintf(&in, "%d %s\n", c.deliveryCount, hex.EncodeToString(toWire(t, m, c.deliveryCount)))
	}
	out := pyinterop.Run(t, 60*time.Second, []byte(in.String()), pyinterop.Script(t, "servicebus_wire.py"), "consume")
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("Python popped %d messages, want %d:\n%s", len(lines), len(cases), out)
	}
	for i, c := range cases {
		var p pyPopped
		if err := json.Unmarshal([]byte(lines[i]), &p); err != nil {
			t.Fatalf("%s: %v: %s", c.name, err, lines[i])
		}
		wantBody, err := envelope.SetAttempts(fixture, c.pyAttempts)
		if err != nil {
			t.Fatal(err)
		}
		if c.pyAttempts != 0 {
			// Python re-encodes the body (compact) when it writes the reconciled count.
			var compact bytes.Buffer
			if err := json.Compact(&compact, wantBody); err != nil {
				t.Fatal(err)
			}
			wantBody = compact.Bytes()
		}
		if p.Body != string(wantBody) {
			t.Errorf("%s: Python popped body %q, want the fixture with attempts %d", c.name, p.Body, c.pyAttempts)
		}
		if p.RouteURN != c.wantRoute {
			t.Errorf("%s: Python route %q, want %q", c.name, p.RouteURN, c.wantRoute)
		}
		if len(p.Headers) != len(c.pyHeaders) {
			t.Errorf("%s: Python headers %v, want %v", c.name, p.Headers, c.pyHeaders)
		}

		// The same bytes through the Go side agree with Python's verdicts.
		m, _ := Project(c.msg, time.Now())
		if c.schema != nil {
			m.ApplicationProperties[PropSchemaVersion] = c.schema
		}
		back := fromWire(t, toWire(t, m, c.deliveryCount))
		d := Reconcile("orders", &azservicebus.ReceivedMessage{Body: back.Body, ApplicationProperties: back.ApplicationProperties, DeliveryCount: c.deliveryCount})
		ok, _ := settle.GateSchemaVersion(d.SchemaVersion, true)
		if ok != (c.wantRoute == "") {
			t.Errorf("%s: Go gate passes=%v, Python route %q", c.name, ok, p.RouteURN)
		}
		if d.Redeliveries != c.wantAttempts {
			t.Errorf("%s: Go redeliveries %d, want %d", c.name, d.Redeliveries, c.wantAttempts)
		}
	}
}
