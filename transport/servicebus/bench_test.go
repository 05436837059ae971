package servicebus

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue/transport"
)

// No Service Bus namespace or emulator runs here, so these benchmarks measure what the
// transport adds on the client side: the projection onto the SDK's Message and the
// reconciliation of a ReceivedMessage, each beside the same work done by hand, and a
// publish/receive/complete round trip through the fake broker beside the raw seam calls.

var benchProjection = transport.Projection{URN: "urn:babel:orders:created", TraceID: "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
	MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567", Lang: "go", SchemaVersion: 1, CreatedAt: 1749132727000}

var sinkMsg *azservicebus.Message

func BenchmarkRawProject(b *testing.B) {
	body := []byte(orderBody)
	b.ReportAllocs()
	for b.Loop() {
		ct, subj, cid, mid := "application/json", benchProjection.URN, benchProjection.TraceID, benchProjection.MessageID
		sinkMsg = &azservicebus.Message{Body: body, ContentType: &ct, Subject: &subj, CorrelationID: &cid, MessageID: &mid,
			ApplicationProperties: map[string]any{
				PropSchemaVersion: int32(benchProjection.SchemaVersion), PropSourceLang: benchProjection.Lang, PropCreatedAt: benchProjection.CreatedAt,
			}}
	}
}

func BenchmarkTransportProject(b *testing.B) {
	m := &transport.Message{Queue: "orders", Body: []byte(orderBody), Projection: benchProjection}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if sinkMsg, err = Project(m, now); err != nil {
			b.Fatal(err)
		}
	}
}

var sinkDelivery *transport.Delivery

func benchReceived() *azservicebus.ReceivedMessage {
	return &azservicebus.ReceivedMessage{Body: []byte(orderBody), DeliveryCount: 3, ApplicationProperties: map[string]any{
		PropSchemaVersion: int32(1), PropSourceLang: "php", PropCreatedAt: int64(1749132727000), "traceparent": "00-x-01"}}
}

func BenchmarkRawReconcile(b *testing.B) {
	rm := benchReceived()
	b.ReportAllocs()
	for b.Loop() {
		d := &transport.Delivery{Queue: "orders", Body: rm.Body, Redeliveries: int(rm.DeliveryCount) - 1,
			SchemaVersion: int64(rm.ApplicationProperties[PropSchemaVersion].(int32))}
		if s, ok := rm.ApplicationProperties["traceparent"].(string); ok {
			d.Headers = map[string]string{"traceparent": s}
		}
		sinkDelivery = d
	}
}

func BenchmarkTransportReconcile(b *testing.B) {
	rm := benchReceived()
	b.ReportAllocs()
	for b.Loop() {
		sinkDelivery = Reconcile("orders", rm)
	}
}

// The round trip pair: send, receive one, complete, on the fake broker.

func BenchmarkRawRoundTripFake(b *testing.B) {
	fb := newFakeBroker()
	ns := fb.client()
	s, _ := ns.newSender("orders")
	r, _ := ns.newReceiver("orders")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ct, subj, cid, mid := "application/json", benchProjection.URN, benchProjection.TraceID, benchProjection.MessageID
		m := &azservicebus.Message{Body: []byte(orderBody), ContentType: &ct, Subject: &subj, CorrelationID: &cid, MessageID: &mid,
			ApplicationProperties: map[string]any{PropSchemaVersion: int32(1), PropSourceLang: "go", PropCreatedAt: int64(1749132727000)}}
		if err := s.SendMessage(ctx, m, nil); err != nil {
			b.Fatal(err)
		}
		got, err := r.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(got) != 1 {
			b.Fatal(err)
		}
		if err := r.CompleteMessage(ctx, got[0], nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTransportRoundTripFake(b *testing.B) {
	tr := newTransport(newFakeBroker().client(), newConfig([]Option{WithLockRenewal(-1)}))
	ctx := context.Background()
	c, err := tr.Consume(ctx, "orders", transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close(ctx)
	m := &transport.Message{Queue: "orders", Body: []byte(orderBody), Projection: benchProjection}
	b.ReportAllocs()
	for b.Loop() {
		if err := tr.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
		d, err := c.Receive(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			b.Fatal(err)
		}
	}
}
