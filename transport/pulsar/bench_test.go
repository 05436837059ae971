package pulsar_test

import (
	"context"
	"testing"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// Each benchmark pair does the same work on the real broker: the raw pulsar-client-go
// client beside the transport, with the same producer settings (no batching, one
// synchronous send per message) and the same receiver queue.

var benchBody = body("bench")

var benchProps = map[string]string{
	"bq-job": "urn:babel:test:bench", "bq-trace-id": "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
	"bq-message-id": "f1e2d3c4-b5a6-4789-90ab-cdef01234567", "bq-schema-version": "1",
	"bq-source-lang": "go", "bq-attempts": "0",
}

var benchMsg = transport.Projection{
	URN: "urn:babel:test:bench", TraceID: "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
	MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567", Lang: "go", SchemaVersion: 1,
}

func rawProducer(b *testing.B, c pc.Client, topic string) pc.Producer {
	p, err := c.CreateProducer(pc.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p
}

func BenchmarkRawSend(b *testing.B) {
	c := rawClient(b)
	p := rawProducer(b, c, transporttest.UniqueName("bqbench-raw-send"))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.Send(ctx, &pc.ProducerMessage{Payload: benchBody, Properties: benchProps}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTransportPublish(b *testing.B) {
	tr := openTransport(b, "")
	q := transporttest.UniqueName("bqbench-tr-send")
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: benchBody, Projection: benchMsg}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRawSendReceiveAck(b *testing.B) {
	c := rawClient(b)
	topic := transporttest.UniqueName("bqbench-raw-rt")
	p := rawProducer(b, c, topic)
	cons, err := c.Subscribe(pc.ConsumerOptions{
		Topic: topic, SubscriptionName: "babelqueue", Type: pc.Shared,
		SubscriptionInitialPosition: pc.SubscriptionPositionEarliest, ReceiverQueueSize: 8,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cons.Close)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.Send(ctx, &pc.ProducerMessage{Payload: benchBody, Properties: benchProps}); err != nil {
			b.Fatal(err)
		}
		m, err := cons.Receive(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := cons.Ack(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTransportSendReceiveAck(b *testing.B) {
	tr := openTransport(b, "")
	q := transporttest.UniqueName("bqbench-tr-rt")
	ctx := context.Background()
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 8})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(ctx) })
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: benchBody, Projection: benchMsg}); err != nil {
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
