package kafka_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// The benchmarks run each pair in the same process against the same broker: the raw
// franz-go client doing the same work, then the transport. Compare ratios, not absolute
// timings (see docs/transports/kafka.md). go test's -count repeats each sub-benchmark
// back to back (Raw, Raw, …, Transport, Transport, …), so drift on a shared machine
// lands on one side; BenchmarkPublishAlternating alternates the two producers in blocks
// within one run instead.

var benchBody = []byte(`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042,"lines":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}]},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`)

var benchProjection = transport.Projection{
	URN: "urn:babel:orders:created", TraceID: "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
	MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567", Lang: "go", SchemaVersion: 1, CreatedAt: 1749132727000,
}

// rawHeaders is what the transport projects, so the raw producer writes the same bytes.
func rawHeaders() []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: "bq-job", Value: []byte(benchProjection.URN)},
		{Key: "bq-trace-id", Value: []byte(benchProjection.TraceID)},
		{Key: "bq-message-id", Value: []byte(benchProjection.MessageID)},
		{Key: "bq-schema-version", Value: []byte("1")},
		{Key: "bq-source-lang", Value: []byte("go")},
		{Key: "bq-attempts", Value: []byte("0")},
	}
}

// BenchmarkPublish runs the raw producer and the transport side by side (sub-benchmarks
// Raw and Transport).
func BenchmarkPublish(b *testing.B) {
	b.Run("Raw", benchRawPublish)
	b.Run("Transport", benchTransportPublish)
}

// BenchmarkConsumeCommit runs the raw group consumer and the transport side by side.
func BenchmarkConsumeCommit(b *testing.B) {
	b.Run("Raw", benchRawConsumeCommit)
	b.Run("RawReadHeaders", benchRawConsumeCommitReadHeaders)
	b.Run("Transport", benchTransportConsumeCommit)
}

// benchRawPublish: franz-go Produce (fire-and-forget, callback) of b.N records with the
// binding's headers, flushed at the end.
func benchRawPublish(b *testing.B) {
	cl := rawClient(b, kgo.AllowAutoTopicCreation())
	q := newTopic(b, "bqbench-rawpub")
	createTopic(b, q, 1)
	ctx := context.Background()
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			b.Error(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cl.Produce(ctx, rawRecord(q), promise)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// rawRecord is what a careful franz-go user writes by hand for one message: a copy of
// the value (the caller's buffer may be reused), the six headers, the created-at
// timestamp.
func rawRecord(topic string) *kgo.Record {
	return &kgo.Record{Topic: topic, Value: append([]byte{}, benchBody...), Headers: rawHeaders(),
		Timestamp: time.UnixMilli(benchProjection.CreatedAt)}
}

// publishBlock is how many records each side of BenchmarkPublishAlternating publishes
// (and flushes) before the other side's turn.
const publishBlock = 10000

// BenchmarkPublishAlternating: the raw producer and Transport.Publish each publish b.N
// records fire-and-forget to their own topic, in alternating blocks of publishBlock
// records, each block flushed and timed on its own, the order of the pair swapped every
// round. Both sides see the same broker and machine load, so drift cancels out of the
// ratio. It reports each side's ns per record and their ratio (raw÷transport, ≥ 1 is as
// fast or faster); ns/op is the sum of both sides.
func BenchmarkPublishAlternating(b *testing.B) {
	cl := rawClient(b, kgo.AllowAutoTopicCreation())
	tr := openKafka(b)
	qr, qt := newTopic(b, "bqbench-altraw"), newTopic(b, "bqbench-alttr")
	createTopic(b, qr, 1)
	createTopic(b, qt, 1)
	ctx := context.Background()
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			b.Error(err)
		}
	}
	m := &transport.Message{Queue: qt, Body: benchBody, Projection: benchProjection}
	raw := func(n int) time.Duration {
		start := time.Now()
		for range n {
			cl.Produce(ctx, rawRecord(qr), promise)
		}
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	viaTransport := func(n int) time.Duration {
		start := time.Now()
		for range n {
			if err := tr.Publish(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
		if err := tr.Producer().Flush(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	raw(100) // both producers load their topic's metadata outside the timings
	viaTransport(100)
	var rawD, trD time.Duration
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; round++ {
		n := min(publishBlock, b.N-done)
		if round%2 == 0 {
			rawD += raw(n)
			trD += viaTransport(n)
		} else {
			trD += viaTransport(n)
			rawD += raw(n)
		}
		done += n
	}
	b.ReportMetric(float64(rawD)/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(trD)/float64(b.N), "transport-ns/op")
	b.ReportMetric(float64(rawD)/float64(trD), "raw/transport")
}

// benchTransportPublish: Transport.Publish of b.N messages, flushed at the end.
func benchTransportPublish(b *testing.B) {
	tr := openKafka(b)
	q := newTopic(b, "bqbench-trpub")
	createTopic(b, q, 1)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: benchBody, Projection: benchProjection}); err != nil {
			b.Fatal(err)
		}
	}
	if err := tr.Producer().Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// fill writes n records to a new topic, outside the timer.
func fill(b *testing.B, prefix string, n int) string {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	q := newTopic(b, prefix)
	createTopic(b, q, 1)
	cl := rawClient(b)
	ctx := context.Background()
	for i := 0; i < n; i++ {
		cl.Produce(ctx, &kgo.Record{Topic: q, Value: benchBody, Headers: rawHeaders()}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return q
}

// benchRawConsumeCommit: a franz-go group consumer with auto-commit off polls b.N
// records and commits each polled batch synchronously, then leaves the group. It never
// looks inside a record.
func benchRawConsumeCommit(b *testing.B) { rawConsumeCommit(b, func(*kgo.Record) {}) }

// benchRawConsumeCommitReadHeaders: the same, reading what the binding obliges every
// consumer to read: the bq-attempts count and the bq-schema-version of each record.
func benchRawConsumeCommitReadHeaders(b *testing.B) {
	var attempts, v1 int
	rawConsumeCommit(b, func(r *kgo.Record) {
		for _, h := range r.Headers {
			switch h.Key {
			case "bq-attempts":
				if n, err := strconv.Atoi(string(h.Value)); err == nil {
					attempts += n
				}
			case "bq-schema-version":
				if string(h.Value) == "1" {
					v1++
				}
			}
		}
	})
	if v1 < b.N {
		b.Fatalf("read %d schema versions of %d records", v1, b.N)
	}
}

func rawConsumeCommit(b *testing.B, each func(*kgo.Record)) {
	q := fill(b, "bqbench-rawcons", b.N)
	b.ReportAllocs()
	cl := rawClient(b, kgo.ConsumerGroup(transporttest.UniqueName("bqbench")), kgo.ConsumeTopics(q),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	got := 0
	for got < b.N {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			b.Fatalf("consumed %d of %d: %v", got, b.N, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			each(r)
			got++
		})
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cl.Close()
}

// consumeRun is how many records each side of BenchmarkConsumeCommitAlternating
// consumes in one turn.
const consumeRun = 200000

// BenchmarkConsumeCommitAlternating: a raw franz-go group consumer and a transport
// consumer take turns, the order of the pair swapped every round, each turn consuming
// consumeRun records (b.N in all per side) from a topic filled for it beforehand, with a
// new group:
//
//   - raw: auto-commit off, polling, reading bq-attempts and bq-schema-version of each
//     record as the binding obliges, committing each polled batch synchronously, and
//     leaving the group;
//   - transport: Consume (prefetch 64), Receive and Settle(Ack) per record, background
//     commits, and Close, which commits the last offsets and leaves the group.
//
// Each turn is timed from its first record, so joining the group is left out; on both
// sides that also leaves out decoding the first fetch, which the first record waits for
// (on the transport side the records are admitted in slabs as they are handed out). The
// turns never overlap, and each starts after a garbage collection, so neither side's
// background fetching or garbage slows the other's timing, and both sides see the same
// machine load. It reports each side's ns per record and
// their ratio (raw÷transport, ≥ 1 is as fast or faster); ns/op is the sum of both sides.
func BenchmarkConsumeCommitAlternating(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tr := openKafka(b)
	raw := func(q string, n int) time.Duration {
		cl := rawClient(b, kgo.ConsumerGroup(transporttest.UniqueName("bqbench")), kgo.ConsumeTopics(q),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		var start time.Time
		got, v1 := 0, 0
		for got < n {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				b.Fatalf("raw consumed %d of %d: %v", got, n, err)
			}
			if got == 0 && fs.NumRecords() > 0 {
				start = time.Now()
			}
			fs.EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					switch h.Key {
					case "bq-attempts":
						if _, err := strconv.Atoi(string(h.Value)); err != nil {
							b.Error(err)
						}
					case "bq-schema-version":
						if string(h.Value) == "1" {
							v1++
						}
					}
				}
				got++
			})
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				b.Fatal(err)
			}
		}
		cl.Close()
		d := time.Since(start)
		if v1 != n {
			b.Fatalf("raw read %d schema versions of %d records", v1, n)
		}
		return d
	}
	viaTransport := func(q string, n int) time.Duration {
		c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 64})
		if err != nil {
			b.Fatal(err)
		}
		var start time.Time
		for i := range n {
			d, err := c.Receive(ctx)
			if err != nil {
				b.Fatalf("transport received %d of %d: %v", i, n, err)
			}
			if i == 0 {
				start = time.Now()
			}
			if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.Close(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var rawD, trD time.Duration
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; round++ {
		n := min(consumeRun, b.N-done)
		qr := fill(b, "bqbench-altrawcons", n)
		qt := fill(b, "bqbench-alttrcons", n)
		if round%2 == 0 {
			runtime.GC()
			rawD += raw(qr, n)
			runtime.GC()
			trD += viaTransport(qt, n)
		} else {
			runtime.GC()
			trD += viaTransport(qt, n)
			runtime.GC()
			rawD += raw(qr, n)
		}
		done += n
	}
	b.StopTimer()
	rawNs := float64(rawD) / float64(b.N)
	trNs := float64(trD) / float64(b.N)
	b.ReportMetric(rawNs, "raw-ns/op")
	b.ReportMetric(trNs, "transport-ns/op")
	b.ReportMetric(rawNs/trNs, "raw/transport")
}

// benchTransportConsumeCommit: a transport consumer (prefetch 64) hands out b.N
// records one by one and each is settled with Ack; closing it commits the last offsets.
func benchTransportConsumeCommit(b *testing.B) {
	q := fill(b, "bqbench-trcons", b.N)
	b.ReportAllocs()
	tr := openKafka(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 64})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		d, err := c.Receive(ctx)
		if err != nil {
			b.Fatalf("received %d of %d: %v", i, b.N, err)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// Example opens a worker's transport from a URL.
func Example() {
	ctx := context.Background()
	tr, err := transport.Open(ctx, "kafka://127.0.0.1:9092?group=billing&delivery_timeout=10s")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close(ctx)
	fmt.Println(tr.Capabilities().DeadLetterSuffix)
}
