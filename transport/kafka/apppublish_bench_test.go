package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"runtime/metrics"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/benchpair"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// appPublishURN is the URN benchmarks/sdkcompare publishes.
const appPublishURN = "urn:babel:bench:sdk"

// sdkcompareData is benchmarks/sdkcompare's payload.
type sdkcompareData struct {
	N  int   `json:"n"`
	At int64 `json:"at,omitempty"`
}

// largeData is a 64 KiB payload: the data object of transporttest.LargeBodies.
var largeData = func() json.RawMessage {
	bodies := transporttest.LargeBodies(1, 64, "bench")
	var e struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(bodies[0], &e); err != nil {
		panic(err)
	}
	return e.Data
}()

// sdkcompareBody is what benchmarks/sdkcompare's raw franz-go publisher builds for
// message n: the envelope written with fmt around data.
func sdkcompareBody(n int, data string) []byte {
	return fmt.Appendf(nil, `{"job":"urn:babel:bench:sdk","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":%s,"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-%012d","queue":"bench","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`, data, n)
}

// sdkcompareRecord is benchmarks/sdkcompare's raw record for message n: its body, the
// six projected headers from a map, the created-at timestamp.
func sdkcompareRecord(topic string, n int, data string) *kgo.Record {
	meta := map[string]string{"bq-job": appPublishURN, "bq-trace-id": "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
		"bq-message-id":     fmt.Sprintf("f1e2d3c4-b5a6-4789-90ab-%012d", n),
		"bq-schema-version": "1", "bq-source-lang": "go", "bq-attempts": "0"}
	var hs []kgo.RecordHeader
	for k, v := range meta {
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return &kgo.Record{Topic: topic, Value: sdkcompareBody(n, data), Headers: hs, Timestamp: time.UnixMilli(1749132727000)}
}

// sideCost is what one side of a publish pair spent, turn by turn.
type sideCost struct {
	cpu           []time.Duration // process CPU per turn (user + sys)
	allocs, bytes []uint64        // heap allocations per turn
	peakHeap      []uint64        // the largest heap (live and not yet swept) sampled in the turn
}

var heapSamples = []string{"/gc/heap/allocs:objects", "/gc/heap/allocs:bytes", "/memory/classes/heap/objects:bytes"}

func readHeap() (allocs, bytes, heap uint64) {
	s := make([]metrics.Sample, len(heapSamples))
	for i, name := range heapSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()
}

// measured wraps one side's turn: it records the turn's process CPU, allocations and
// the peak heap a sampler saw every millisecond while the turn ran.
func (c *sideCost) measured(turn func() error) func() error {
	return func() error {
		a0, b0, _ := readHeap()
		stop := make(chan struct{})
		done := make(chan uint64)
		go func() {
			var peak uint64
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				_, _, h := readHeap()
				peak = max(peak, h)
				select {
				case <-stop:
					done <- peak
					return
				case <-tick.C:
				}
			}
		}()
		cpu0 := transporttest.ProcessCPU()
		err := turn()
		cpu := transporttest.ProcessCPU() - cpu0
		close(stop)
		peak := <-done
		a1, b1, _ := readHeap()
		c.cpu = append(c.cpu, cpu)
		c.allocs = append(c.allocs, a1-a0)
		c.bytes = append(c.bytes, b1-b0)
		c.peakHeap = append(c.peakHeap, peak)
		return err
	}
}

func medianOf[T time.Duration | uint64](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func (c *sideCost) report(b *testing.B, side string, per int) {
	b.ReportMetric(float64(medianOf(c.cpu).Nanoseconds())/float64(per), side+"-cpu-ns/msg")
	b.ReportMetric(float64(medianOf(c.allocs))/float64(per), side+"-allocs/msg")
	b.ReportMetric(float64(medianOf(c.bytes))/float64(per), side+"-B/msg")
	b.ReportMetric(float64(medianOf(c.peakHeap))/(1<<20), side+"-peak-heap-MiB")
}

// BenchmarkAppPublish is issue 39's Kafka publish figure in one process: in b.N turns
// (the order of the pair swapped every turn, internal/benchpair), raw franz-go
// publishes a block of messages as benchmarks/sdkcompare's raw publisher does (the
// envelope written with fmt, the six projected headers, fire-and-forget, one flush at
// the block's end), and App.Publish publishes the same number of new envelopes
// (minted ids, the data marshalled, the projected headers) on the transport, flushed
// the same way. Each side reports its median CPU per message (the process's user +
// system time over the block: the producer's goroutines included), allocations and
// bytes per message, the median of the peak heap sampled every millisecond during
// its turns; vs-base is raw's wall time over the SDK's.
//
//	CI=true go test -run '^$' -bench AppPublish -benchtime 20x -count 3 ./transport/kafka/
func BenchmarkAppPublish(b *testing.B) {
	brokerURL(b)
	for _, size := range []struct {
		name    string
		per     int
		rawData func(n int) string
		sdkData func(n int) any
	}{
		{"small", 2000, func(n int) string { return fmt.Sprintf(`{"n":%d}`, n) },
			func(n int) any { return sdkcompareData{N: n} }},
		{"64KiB", 200, func(int) string { return string(largeData) },
			func(int) any { return largeData }},
	} {
		b.Run(size.name, func(b *testing.B) {
			ctx := context.Background()
			cl := rawClient(b)
			tr := openKafka(b)
			qr, qs := newTopic(b, "bqbench-apppub-raw"), newTopic(b, "bqbench-apppub-sdk")
			createTopic(b, qr, 1)
			createTopic(b, qs, 1)
			app, err := babelqueue.New(tr, babelqueue.WithQueue(qs), babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				b.Fatal(err)
			}
			var failed benchpair.Callbacks
			promise := func(_ *kgo.Record, err error) { failed.Done(err) }
			raw := func(n int) error {
				failed.Add(n)
				for i := range n {
					cl.Produce(ctx, sdkcompareRecord(qr, i, size.rawData(i)), promise)
				}
				if err := cl.Flush(ctx); err != nil {
					return err
				}
				return failed.Wait()
			}
			sdk := func(n int) error {
				for i := range n {
					if _, err := app.Publish(ctx, appPublishURN, size.sdkData(i)); err != nil {
						return err
					}
				}
				return tr.Flush(ctx)
			}
			// Both producers load their topic's metadata outside the timings.
			if err := raw(10); err != nil {
				b.Fatal(err)
			}
			if err := sdk(10); err != nil {
				b.Fatal(err)
			}
			var rawCost, sdkCost sideCost
			bt, st := benchpair.Turns(b,
				rawCost.measured(func() error { return raw(size.per) }),
				sdkCost.measured(func() error { return sdk(size.per) }))
			rawCost.report(b, "raw", size.per)
			sdkCost.report(b, "sdk", size.per)
			b.ReportMetric(float64(medianOf(bt))/float64(medianOf(st)), "vs-base")
			b.ReportMetric(float64(medianOf(st).Nanoseconds())/float64(size.per), "sdk-ns/msg")
			b.ReportMetric(float64(medianOf(bt).Nanoseconds())/float64(size.per), "raw-ns/msg")
		})
	}
}
