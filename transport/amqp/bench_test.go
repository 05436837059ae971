package amqp

import (
	"context"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
)

// The benchmarks come in pairs: the raw amqp091-go client doing the same work (same
// properties and headers, persistent, confirms) beside the transport, in one run.
//
//	go test -run '^$' -bench . -benchmem ./transport/amqp/

var benchBody = []byte(`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`)

var benchProjection = transport.Projection{URN: "urn:babel:orders:created", TraceID: "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
	MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567", Lang: "go", SchemaVersion: 1, CreatedAt: 1749132727000}

func rawPublishing() amqp091.Publishing {
	return amqp091.Publishing{
		Headers:       amqp091.Table{HeaderSchemaVersion: int32(1), HeaderSourceLang: "go", HeaderAttempts: int32(0)},
		ContentType:   ContentType,
		DeliveryMode:  amqp091.Persistent,
		CorrelationId: benchProjection.TraceID,
		MessageId:     benchProjection.MessageID,
		Type:          benchProjection.URN,
		AppId:         AppID,
		Body:          benchBody,
	}
}

func rawConfirmChannel(b *testing.B, q string) *amqp091.Channel {
	ch := rawChannel(b, rawConn(b))
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	return ch
}

// BenchmarkRawPublishConfirm: one persistent publish and its confirm per op, raw client.
func BenchmarkRawPublishConfirm(b *testing.B) {
	q := newQueue(b)
	ch := rawConfirmChannel(b, q)
	ctx := context.Background()
	p := rawPublishing()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, p)
		if err != nil {
			b.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			b.Fatal("not confirmed", err)
		}
	}
}

// BenchmarkTransportPublish: the same through Transport.Publish (projection, confirm).
func BenchmarkTransportPublish(b *testing.B) {
	q := newQueue(b)
	tr := openT(b)
	ctx := context.Background()
	m := &transport.Message{Queue: q, Body: benchBody, Projection: benchProjection}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := tr.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawPublishConfirmParallel: concurrent publishers, each waiting for its own
// confirm, on one channel per goroutine (raw client).
func BenchmarkRawPublishConfirmParallel(b *testing.B) {
	q := newQueue(b)
	conn := rawConn(b)
	rawConfirmChannel(b, q)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ch, err := conn.Channel()
		if err != nil {
			b.Error(err)
			return
		}
		defer ch.Close()
		if err := ch.Confirm(false); err != nil {
			b.Error(err)
			return
		}
		p := rawPublishing()
		for pb.Next() {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, p)
			if err != nil {
				b.Error(err)
				return
			}
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				b.Error("not confirmed", err)
				return
			}
		}
	})
}

// BenchmarkTransportPublishParallel: the same through Transport.Publish.
func BenchmarkTransportPublishParallel(b *testing.B) {
	q := newQueue(b)
	tr := openT(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		m := &transport.Message{Queue: q, Body: benchBody, Projection: benchProjection}
		for pb.Next() {
			if err := tr.Publish(ctx, m); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// fill puts n messages on q with the raw client, outside the timer.
func fill(b *testing.B, q string, n int) {
	b.Helper()
	ch := rawConfirmChannel(b, q)
	ctx := context.Background()
	p := rawPublishing()
	var last *amqp091.DeferredConfirmation
	for range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, p)
		if err != nil {
			b.Fatal(err)
		}
		last = dc
	}
	if last != nil {
		if ok, err := last.WaitContext(ctx); err != nil || !ok {
			b.Fatal("fill not confirmed", err)
		}
	}
}

// BenchmarkRawConsumeAck: basic.consume with a prefetch of 32, one ack per delivery.
func BenchmarkRawConsumeAck(b *testing.B) {
	q := newQueue(b)
	fill(b, q, b.N)
	ch := rawChannel(b, rawConn(b))
	if err := ch.Qos(32, 0, false); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		d := <-ds
		if err := d.Ack(false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTransportConsumeAck: the same through Consumer.Receive and Settle(Ack).
func BenchmarkTransportConsumeAck(b *testing.B) {
	q := newQueue(b)
	fill(b, q, b.N)
	tr := openT(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 32})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	for range b.N {
		d, err := c.Receive(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawSettleWithRetry: consume, re-publish to a retry queue, wait for the
// confirm, then ack: what a retry costs with the raw client.
func BenchmarkRawSettleWithRetry(b *testing.B) {
	q, retry := newQueue(b), newQueue(b)
	fill(b, q, b.N)
	conn := rawConn(b)
	pub := rawConfirmChannel(b, retry)
	ch := rawChannel(b, conn)
	if err := ch.Qos(32, 0, false); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	p := rawPublishing()
	p.Headers = amqp091.Table{HeaderSchemaVersion: int32(1), HeaderSourceLang: "go", HeaderAttempts: int32(1)}
	for range b.N {
		d := <-ds
		p.Body = d.Body
		dc, err := pub.PublishWithDeferredConfirmWithContext(ctx, "", retry, false, false, p)
		if err != nil {
			b.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			b.Fatal("not confirmed", err)
		}
		if err := d.Ack(false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTransportSettleWithRetry: the same through Settle(Ack, Writes: retry).
func BenchmarkTransportSettleWithRetry(b *testing.B) {
	q, retry := newQueue(b), newQueue(b)
	fill(b, q, b.N)
	tr := openT(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 32})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	w := &transport.Message{Queue: retry, Attempts: 1, Projection: benchProjection}
	for range b.N {
		d, err := c.Receive(ctx)
		if err != nil {
			b.Fatal(err)
		}
		w.Body = d.Body
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{w}}); err != nil {
			b.Fatal(err)
		}
	}
}
