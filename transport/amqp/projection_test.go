package amqp

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// rabbitBlock is the manifest's "rabbitmq" block.
type rabbitBlock struct {
	PropertyProjection struct {
		EnvelopeFile string                     `json:"envelope_file"`
		Properties   map[string]string          `json:"properties"`
		Headers      map[string]json.RawMessage `json:"headers"`
	} `json:"property_projection"`
}

// TestManifestRabbitMQProjection publishes the manifest's fixture through the
// transport and reads it back with raw amqp091: every property and native-typed header
// of the manifest's rabbitmq block, a persistent delivery and the body byte for byte.
func TestManifestRabbitMQProjection(t *testing.T) {
	var m rabbitBlock
	dir := transporttest.ManifestBlock(t, "rabbitmq", &m)
	pp := m.PropertyProjection
	if len(pp.Properties) == 0 || len(pp.Headers) == 0 {
		t.Fatal("manifest has no rabbitmq.property_projection")
	}
	body := transporttest.Fixture(t, dir, pp.EnvelopeFile)
	proj, attempts := transporttest.FixtureProjection(t, body)

	tr := openT(t)
	q := newQueue(t)
	if err := tr.Publish(ctxT(t), &transport.Message{Queue: q, Body: body, Attempts: attempts, Projection: proj}); err != nil {
		t.Fatal(err)
	}
	ch := rawChannel(t, rawConn(t))
	var d amqp091.Delivery
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			d = got
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the published message is not on the queue")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !bytes.Equal(d.Body, body) {
		t.Errorf("body changed:\n got %q\nwant %q", d.Body, body)
	}
	props := map[string]string{
		"type": d.Type, "correlation_id": d.CorrelationId, "message_id": d.MessageId,
		"app_id": d.AppId, "content_type": d.ContentType,
	}
	for k, want := range pp.Properties {
		got, known := props[k]
		if !known {
			t.Errorf("manifest property %q is not checked by this test", k)
			continue
		}
		if got != want {
			t.Errorf("property %s = %q, want %q", k, got, want)
		}
	}
	if d.DeliveryMode != amqp091.Persistent {
		t.Errorf("delivery_mode = %d, want persistent (2)", d.DeliveryMode)
	}
	for k, rawWant := range pp.Headers {
		got, ok := d.Headers[k]
		if !ok {
			t.Errorf("header %s missing (headers: %v)", k, d.Headers)
			continue
		}
		var want any
		dec := json.NewDecoder(bytes.NewReader(rawWant))
		dec.UseNumber()
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		switch w := want.(type) {
		case json.Number:
			wn, err := w.Int64()
			if err != nil {
				t.Fatalf("manifest header %s is not an integer: %s", k, w)
			}
			gn, isInt := asInt64(got)
			if !isInt {
				t.Errorf("header %s = %T %v, want a native integer %d (not a string)", k, got, got, wn)
			} else if gn != wn {
				t.Errorf("header %s = %d, want %d", k, gn, wn)
			}
		case string:
			if s, ok := got.(string); !ok || s != w {
				t.Errorf("header %s = %T %v, want string %q", k, got, got, w)
			}
		default:
			t.Fatalf("manifest header %s has an unexpected type %T", k, want)
		}
	}
	if len(d.Headers) != len(pp.Headers) {
		t.Errorf("headers = %v, want exactly the manifest's %d", d.Headers, len(pp.Headers))
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

// TestDeliveryHeadersAreOnlyUserHeaders: the projected headers, and the x-death
// headers RabbitMQ adds when a delay queue dead-letters a message back, never show up
// in Delivery.Headers; a user header cannot replace a projected one.
func TestDeliveryHeadersAreOnlyUserHeaders(t *testing.T) {
	tr := openT(t)
	q := newQueue(t)
	user := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-tenant": "acme"}
	withClash := maps.Clone(user)
	withClash[HeaderAttempts] = "999"
	withClash[HeaderSourceLang] = "cobol"
	body := []byte(`{"job":"urn:babel:t:h","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":2}`)
	proj := transport.Projection{URN: "urn:babel:t:h", TraceID: "t", MessageID: "m", Lang: "go", SchemaVersion: 1}
	ctx := ctxT(t)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body, Headers: withClash, Attempts: 2, Projection: proj}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body, Headers: withClash, Attempts: 2, Projection: proj, Delay: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for i := range 2 {
		d := receive(t, c, 30*time.Second)
		if !reflect.DeepEqual(d.Headers, user) {
			t.Errorf("delivery %d: Headers = %v, want exactly %v", i, d.Headers, user)
		}
		if !d.HasAttemptsHeader || d.AttemptsHeader != 2 {
			t.Errorf("delivery %d: attempts header = %d (present %v), want 2: the projected x-attempts wins", i, d.AttemptsHeader, d.HasAttemptsHeader)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRawWriteCarriesAttemptsHeader: a poison dead-letter or bounded retry is a raw
// write (no projection); its count rides in x-attempts only.
func TestRawWriteCarriesAttemptsHeader(t *testing.T) {
	tr := openT(t)
	q := newQueue(t)
	ctx := ctxT(t)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte("\xff not json"), Attempts: 2}); err != nil {
		t.Fatal(err)
	}
	ch := rawChannel(t, rawConn(t))
	var d amqp091.Delivery
	for i := 0; ; i++ {
		got, ok, err := ch.Get(q, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			d = got
			break
		}
		if i > 200 {
			t.Fatal("raw write not on the queue")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, ok := asInt64(d.Headers[HeaderAttempts]); !ok || n != 2 {
		t.Errorf("x-attempts = %T %v, want integer 2", d.Headers[HeaderAttempts], d.Headers[HeaderAttempts])
	}
	for _, h := range []string{HeaderSchemaVersion, HeaderSourceLang} {
		if v, ok := d.Headers[h]; ok {
			t.Errorf("raw write projected %s = %v with nothing known", h, v)
		}
	}
	if d.Type != "" || d.MessageId != "" || d.CorrelationId != "" {
		t.Errorf("raw write invented properties: type %q message_id %q correlation_id %q", d.Type, d.MessageId, d.CorrelationId)
	}
	if err := ch.Nack(d.DeliveryTag, false, true); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	got := receive(t, c, 30*time.Second)
	if !got.HasAttemptsHeader || got.AttemptsHeader != 2 {
		t.Errorf("Delivery attempts header = %d (present %v), want 2", got.AttemptsHeader, got.HasAttemptsHeader)
	}
	if got.Redeliveries != 1 {
		t.Errorf("Redeliveries of a message the broker marked redelivered = %d, want 1", got.Redeliveries)
	}
	if err := c.Settle(ctx, got, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
}

// TestHostileBrokerData: whatever another producer puts in the header table (wrong
// types, nested tables, huge numbers, an empty body) is data: the consumer neither
// panics nor stops, an unreadable x-attempts is reported as absent, and a number is
// read as written (driverkit.Attempts, the one coercion of every driver).
func TestHostileBrokerData(t *testing.T) {
	tr := openT(t)
	q := newQueue(t)
	ctx := ctxT(t)
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	ch := rawChannel(t, rawConn(t))
	hostile := []struct {
		h        amqp091.Table
		attempts int // the attempts header read, or -1 for none
	}{
		{amqp091.Table{HeaderAttempts: "lots", "n": amqp091.Table{"deep": []any{int32(1), "x"}}}, -1},
		{amqp091.Table{HeaderAttempts: int64(1) << 40, "x-death": "not a list"}, 1 << 40},
		{amqp091.Table{HeaderAttempts: 2.5, "when": time.Unix(1700000000, 0), "bin": []byte{0xff, 0x00}}, -1},
		{amqp091.Table{HeaderAttempts: []any{}, "x-delivery-count": "nope", "f": float32(1.5), "b": true, "dec": amqp091.Decimal{Scale: 2, Value: 150}}, -1},
		{nil, -1},
	}
	for _, h := range hostile {
		if err := ch.PublishWithContext(ctx, "", q, false, false, amqp091.Publishing{Headers: h.h}); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range hostile {
		d := receive(t, c, 30*time.Second)
		switch {
		case h.attempts < 0 && d.HasAttemptsHeader:
			t.Errorf("unreadable x-attempts %v reported as %d", h.h[HeaderAttempts], d.AttemptsHeader)
		case h.attempts >= 0 && (!d.HasAttemptsHeader || d.AttemptsHeader != h.attempts):
			t.Errorf("x-attempts %v reported as %d (present %v), want %d", h.h[HeaderAttempts], d.AttemptsHeader, d.HasAttemptsHeader, h.attempts)
		}
		if d.Body == nil {
			t.Error("empty body handed out as nil")
		}
		if _, ok := d.Headers["n"]; ok {
			t.Errorf("a nested table became a string header: %v", d.Headers)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDelayQueueTopology: a delayed message waits in <q>.delay.<ms>, a durable queue
// whose TTL and dead-letter target send it back to the work queue.
func TestDelayQueueTopology(t *testing.T) {
	tr := openT(t)
	q := newQueue(t)
	ctx := ctxT(t)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`), Delay: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	dq := DelayQueue(q, 2*time.Second)
	if dq != q+".delay.2000" {
		t.Fatalf("DelayQueue = %q", dq)
	}
	ch := rawChannel(t, rawConn(t))
	// A passive declare with other arguments would not check them; declaring with the
	// exact arguments succeeds only when they match what the transport declared.
	info, err := ch.QueueDeclare(dq, true, false, false, false, amqp091.Table{
		"x-message-ttl": int64(2000), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": q,
	})
	if err != nil {
		t.Fatalf("delay queue does not have the documented arguments: %v", err)
	}
	if info.Messages != 1 {
		t.Errorf("delay queue holds %d messages, want 1", info.Messages)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	d := receive(t, c, 30*time.Second)
	if string(d.Body) != `{}` {
		t.Errorf("body = %q", d.Body)
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
}
