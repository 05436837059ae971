package amqp

import (
	"context"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
)

// The benchmarks come in pairs, sub-benchmarks Raw and Transport: the raw amqp091-go
// client doing the same work (same properties and headers, persistent, confirms) beside
// the transport, in one run. go test's -count repeats each sub-benchmark back to back
// (Raw, Raw, …, Transport, Transport, …), so drift on a shared machine lands on one side;
// BenchmarkPublishConfirmAlternating takes it out by alternating the two publishes op by
// op (see docs/transports/amqp.md).
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

func rawConfirmChannel(b testing.TB, q string) *amqp091.Channel {
	ch := rawChannel(b, rawConn(b))
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	return ch
}

// BenchmarkPublishConfirm: one persistent publish and its confirm per op.
func BenchmarkPublishConfirm(b *testing.B) {
	b.Run("Raw", benchRawPublishConfirm)
	b.Run("Transport", benchTransportPublish)
}

// BenchmarkPublishConfirmParallel: four goroutines publishing, each waiting for its own
// confirm.
func BenchmarkPublishConfirmParallel(b *testing.B) {
	b.Run("Raw", benchRawPublishConfirmParallel)
	b.Run("Transport", benchTransportPublishParallel)
}

// BenchmarkConsumeAck: consume with a prefetch of 32 and ack every delivery.
func BenchmarkConsumeAck(b *testing.B) {
	b.Run("Raw", benchRawConsumeAck)
	b.Run("Transport", benchTransportConsumeAck)
}

// BenchmarkSettleWithRetry: consume, write a confirmed retry, ack; through the
// transport with the settle writes pipelined (the default) and awaited
// (pipeline_settles=0). One worker, prefetch 32; the pipelined run includes Close's wait
// for the last confirms.
func BenchmarkSettleWithRetry(b *testing.B) {
	b.Run("Raw", benchRawSettleWithRetry)
	b.Run("Transport", func(b *testing.B) { benchTransportSettleWithRetry(b) })
	b.Run("TransportAwaited", func(b *testing.B) { benchTransportSettleWithRetry(b, WithPipelinedSettles(false)) })
}

// BenchmarkPublishConfirmAlternating: every op is one raw publish + confirm and one
// Transport.Publish (to two fresh queues), in alternating order, each timed on its own.
// Both sides see the same broker and machine at the same moment, so load from other
// processes cancels out of the ratio. It reports the mean and the median of each side
// and the ratio of the means (raw÷transport, ≥ 1 is as fast or faster); ns/op is the sum.
func BenchmarkPublishConfirmAlternating(b *testing.B) {
	qr, qt := newQueue(b), newQueue(b)
	ch := rawConfirmChannel(b, qr)
	tr := openT(b)
	ctx := context.Background()
	p := rawPublishing()
	m := &transport.Message{Queue: qt, Body: benchBody, Projection: benchProjection}
	raw := func() {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", qr, false, false, p)
		if err != nil {
			b.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			b.Fatal("not confirmed", err)
		}
	}
	viaTransport := func() {
		if err := tr.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	viaTransport() // the first Publish declares the queue; keep it out of the timings
	var rawD, trD []time.Duration
	i := 0
	for b.Loop() {
		t0 := time.Now()
		if i%2 == 0 {
			raw()
		} else {
			viaTransport()
		}
		t1 := time.Now()
		if i%2 == 0 {
			viaTransport()
		} else {
			raw()
		}
		t2 := time.Now()
		if i%2 == 0 {
			rawD, trD = append(rawD, t1.Sub(t0)), append(trD, t2.Sub(t1))
		} else {
			trD, rawD = append(trD, t1.Sub(t0)), append(rawD, t2.Sub(t1))
		}
		i++
	}
	rawMean, rawMed := meanMedian(rawD)
	trMean, trMed := meanMedian(trD)
	b.ReportMetric(rawMean, "raw-ns/op")
	b.ReportMetric(trMean, "transport-ns/op")
	b.ReportMetric(rawMed, "raw-p50-ns")
	b.ReportMetric(trMed, "transport-p50-ns")
	b.ReportMetric(rawMean/trMean, "raw/transport")
}

// meanMedian returns the mean and the median of ds in nanoseconds; it sorts ds.
func meanMedian(ds []time.Duration) (mean, median float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	slices.Sort(ds)
	return float64(sum) / float64(len(ds)), float64(ds[len(ds)/2])
}

// benchRawPublishConfirm: one persistent publish and its confirm per op, raw client.
func benchRawPublishConfirm(b *testing.B) {
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

// benchTransportPublish: the same through Transport.Publish (projection, confirm).
func benchTransportPublish(b *testing.B) {
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

// benchRawPublishConfirmParallel: concurrent publishers, each waiting for its own
// confirm, on one channel per goroutine (raw client).
func benchRawPublishConfirmParallel(b *testing.B) {
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

// benchTransportPublishParallel: the same through Transport.Publish.
func benchTransportPublishParallel(b *testing.B) {
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

// benchRawConsumeAck: basic.consume with a prefetch of 32, one ack per delivery.
func benchRawConsumeAck(b *testing.B) {
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

// benchTransportConsumeAck: the same through Consumer.Receive and Settle(Ack).
func benchTransportConsumeAck(b *testing.B) {
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

// benchRawSettleWithRetry: consume, re-publish to a retry queue, wait for the
// confirm, then ack: what a retry costs with the raw client.
func benchRawSettleWithRetry(b *testing.B) {
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

// benchTransportSettleWithRetry: the same through Settle(Ack, Writes: retry).
func benchTransportSettleWithRetry(b *testing.B, opts ...Option) {
	q, retry := newQueue(b), newQueue(b)
	fill(b, q, b.N)
	tr := openT(b, opts...)
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
	if err := c.Close(ctx); err != nil { // waits for the pipelined confirms
		b.Fatal(err)
	}
}
