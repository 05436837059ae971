package artemis_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// The benchmarks run in pairs: raw go-amqp doing the same work as the transport, on the
// same broker in the same run, so the ratio says what the transport costs.
//
//	go test -run '^$' -bench . -benchmem ./transport/artemis/

var benchBody = []byte(`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042,"lines":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}]},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`)

var benchProjection = transport.Projection{
	URN: "urn:babel:orders:created", TraceID: "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
	MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567", Lang: "go", SchemaVersion: 1, CreatedAt: 1749132727000,
}

// rawMessage is the message raw go-amqp sends: the same sections and properties the
// transport projects, built by hand.
func rawMessage() *amqp.Message {
	urn := "urn:babel:orders:created"
	ts := time.UnixMilli(1749132727000)
	return &amqp.Message{
		Header:      &amqp.MessageHeader{Durable: true},
		Annotations: amqp.Annotations{"x-opt-jms-type": urn, "x-opt-jms-dest": int8(0)},
		Properties: &amqp.MessageProperties{
			Subject: &urn, CorrelationID: "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
			MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567", CreationTime: &ts,
		},
		ApplicationProperties: map[string]any{"bq_schema_version": "1", "bq_source_lang": "go", "bq_attempts": "0", "bq_app_id": "babelqueue"},
		Value:                 string(benchBody),
	}
}

// benchQueue names a queue for one run of a benchmark and destroys it, with what is left
// on it, when the run ends. The benchmarks leave messages behind (publishes nobody
// consumes, retry writes, BenchmarkPublishConfirmedBatch's 200 a turn), which the
// shared test broker must not keep: 400,000 of them from one -benchtime=2000x run filled
// its 1 GiB heap.
func benchQueue(b *testing.B, prefix string) string {
	q := transporttest.UniqueName(prefix)
	b.Cleanup(func() {
		if ok, answer := manageBroker(b, "destroyQueue", `["`+q+`",true,true]`); !ok {
			b.Logf("destroying the benchmark's queue %s: %v", q, answer)
		}
	})
	return q
}

func rawSender(b *testing.B, queue string) *amqp.Sender {
	b.Helper()
	conn := rawConn(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	mode := amqp.SenderSettleModeUnsettled
	s, err := sess.NewSender(ctx, queue, &amqp.SenderOptions{TargetCapabilities: []string{"queue"}, SettlementMode: &mode})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// Confirmed publish, one at a time: send and wait for the broker's accepted outcome.
func BenchmarkRawPublish(b *testing.B) {
	s := rawSender(b, benchQueue(b, "bqbench-rawpub"))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := s.Send(ctx, rawMessage(), nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTransportPublish(b *testing.B) {
	tr := openTransport(b)
	q := benchQueue(b, "bqbench-trpub")
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: benchBody, Projection: benchProjection}); err != nil {
			b.Fatal(err)
		}
	}
}

// Confirmed publish from 8 goroutines at once.
func BenchmarkRawPublishParallel(b *testing.B) {
	s := rawSender(b, benchQueue(b, "bqbench-rawpar"))
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := s.Send(ctx, rawMessage(), nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkTransportPublishParallel(b *testing.B) {
	tr := openTransport(b)
	q := benchQueue(b, "bqbench-trpar")
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: benchBody, Projection: benchProjection}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// fill puts n messages on queue with pipelined raw sends (not timed).
func fill(b *testing.B, queue string, n int) {
	b.Helper()
	s := rawSender(b, queue)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	receipts := make([]amqp.SendReceipt, 0, 256)
	for i := 0; i < n; i++ {
		r, err := s.SendWithReceipt(ctx, rawMessage(), nil)
		if err != nil {
			b.Fatal(err)
		}
		receipts = append(receipts, r)
		if len(receipts) == cap(receipts) || i == n-1 {
			for _, r := range receipts {
				if _, err := r.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			receipts = receipts[:0]
		}
	}
}

// Receive and accept, prefetch 32: the consume side of a worker.
func BenchmarkRawConsumeAck(b *testing.B) {
	q := benchQueue(b, "bqbench-rawcons")
	fill(b, q, b.N)
	conn := rawConn(b)
	ctx := context.Background()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	r, err := sess.NewReceiver(ctx, q, &amqp.ReceiverOptions{Credit: 32, SourceCapabilities: []string{"queue"}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, err := r.Receive(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.AcceptMessage(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTransportConsumeAck(b *testing.B) {
	q := benchQueue(b, "bqbench-trcons")
	fill(b, q, b.N)
	tr := openTransport(b)
	ctx := context.Background()
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 32})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := c.Receive(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			b.Fatal(err)
		}
	}
}

// Receive, make one confirmed write (a retry re-publish) and only then accept: the
// settle path of a failing handler.
func BenchmarkRawSettleWithWrite(b *testing.B) {
	q := benchQueue(b, "bqbench-rawsettle")
	fill(b, q, b.N)
	s := rawSender(b, benchQueue(b, "bqbench-rawsettle-retry"))
	conn := rawConn(b)
	ctx := context.Background()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	r, err := sess.NewReceiver(ctx, q, &amqp.ReceiverOptions{Credit: 32, SourceCapabilities: []string{"queue"}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, err := r.Receive(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Send(ctx, rawMessage(), nil); err != nil {
			b.Fatal(err)
		}
		if err := r.AcceptMessage(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTransportSettleWithWrite(b *testing.B) {
	q, retry := benchQueue(b, "bqbench-trsettle"), benchQueue(b, "bqbench-trsettle-retry")
	fill(b, q, b.N)
	tr := openTransport(b)
	ctx := context.Background()
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 32})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := c.Receive(ctx)
		if err != nil {
			b.Fatal(err)
		}
		w := &transport.Message{Queue: retry, Body: d.Body, Attempts: 1, Projection: benchProjection}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{w}}); err != nil {
			b.Fatal(err)
		}
	}
}
