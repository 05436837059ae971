package babelqueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/benchpair"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// discard is a transport whose Publish keeps nothing: what is left of App.Publish is
// the runtime's own work (the envelope made and encoded, the message projected).
type discard struct {
	*memory.Transport
	bytes int
}

func (d *discard) Publish(_ context.Context, m *transport.Message) error {
	d.bytes += len(m.Body) + len(m.Projection.MessageID)
	return nil
}

// publishData64K is a 64 KiB data object of order lines, as JSON.
var publishData64K = func() json.RawMessage {
	var b strings.Builder
	b.WriteString(`{"order_id":1042,"lines":[`)
	for i := 0; b.Len() < 64*1024-100; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%06d","title":"item %d of the order","qty":%d,"gift":%t,"note":null}`, i, i, i%7, i%3 == 0)
	}
	b.WriteString(`]}`)
	return json.RawMessage(b.String())
}()

// BenchmarkPublishEnvelope is App.Publish with a transport that discards the message,
// beside the least a hand-written publisher does for the same bytes (the envelope
// written with fmt around the data, as benchmarks/sdkcompare's raw publishers do): the
// runtime's share of a publish, without a broker. The two run in turns of 500
// messages (internal/benchpair); each reports the process's CPU per message (user +
// sys, the garbage collector's included), its median over the turns.
//
//	go test -run '^$' -bench PublishEnvelope -benchmem -benchtime 200x -count 3 .
func BenchmarkPublishEnvelope(b *testing.B) {
	type small struct {
		N int `json:"n"`
	}
	ctx := context.Background()
	d := &discard{Transport: memory.New()}
	app, err := babelqueue.New(d, babelqueue.WithQueue("bench"), babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	const per = 500
	for _, c := range []struct {
		name    string
		data    any
		rawData func() []byte
	}{
		{"small-struct", small{N: 1042}, func() []byte { return fmt.Appendf(nil, `{"n":%d}`, 1042) }},
		{"64KiB-raw", publishData64K, func() []byte { return publishData64K }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var appCPU, handCPU []time.Duration
			cpu := func(into *[]time.Duration, f func() error) func() error {
				return func() error {
					start := transporttest.ProcessCPU()
					err := f()
					*into = append(*into, transporttest.ProcessCPU()-start)
					return err
				}
			}
			viaApp := func() error {
				for range per {
					if _, err := app.Publish(ctx, "urn:babel:orders:created", c.data); err != nil {
						return err
					}
				}
				return nil
			}
			n := 0
			byHand := func() error {
				for range per {
					n++
					body := fmt.Appendf(nil, `{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":%s,"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-%012d","queue":"bench","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}`, c.rawData(), n)
					d.bytes += len(body)
				}
				return nil
			}
			b.ReportAllocs()
			benchpair.Turns(b, cpu(&handCPU, byHand), cpu(&appCPU, viaApp))
			b.ReportMetric(float64(medianCPU(appCPU).Nanoseconds())/per, "app-cpu-ns/msg")
			b.ReportMetric(float64(medianCPU(handCPU).Nanoseconds())/per, "by-hand-cpu-ns/msg")
		})
	}
}

func medianCPU(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
