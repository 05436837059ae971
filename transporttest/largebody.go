//go:build unix

package transporttest

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// LargeURN is the URN of the envelopes [LargeBodies] makes.
const LargeURN = "urn:babel:orders:created"

// LargeLine is one order line of the data [LargeBodies] makes: strings (some not ASCII),
// numbers, a boolean and a null. A typed handler binds the data into a [LargeOrder].
type LargeLine struct {
	SKU        string  `json:"sku"`
	Title      string  `json:"title"`
	Qty        int     `json:"qty"`
	PriceCents int     `json:"price_cents"`
	Ratio      float64 `json:"ratio"`
	Active     bool    `json:"active"`
	Note       *string `json:"note"`
}

// LargeOrder is the data of the envelopes [LargeBodies] makes.
type LargeOrder struct {
	OrderID int         `json:"order_id"`
	Items   []LargeLine `json:"items"`
}

// LargeBodies makes n encoded envelopes whose data holds about kib KiB of order lines,
// for queue.
func LargeBodies(n, kib int, queue string) [][]byte {
	var data LargeOrder
	for i := 0; len(data.Items)*100 < kib*1024; i++ {
		data.Items = append(data.Items, LargeLine{SKU: "SKU-" + string(rune('A'+i%26)) + "-00042",
			Title: "Café item — naïve", Qty: i % 7, PriceCents: 1299 + i, Ratio: 0.25, Active: true})
	}
	out := make([][]byte, n)
	for i := range out {
		data.OrderID = i
		env, err := envelope.Make(LargeURN, data, envelope.WithQueue(queue))
		if err != nil {
			panic(err)
		}
		if out[i], err = env.Encode(); err != nil {
			panic(err)
		}
	}
	return out
}

// ProcessCPU is the CPU time the process used so far (user and system). Beside a broker
// running as a process of its own it is the Go side's cost alone, and on a shared
// machine it varies far less with the other load than the wall-clock time.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportCPUPerKiB reports "cpu-µs/KiB", the process's CPU time since start (a
// [ProcessCPU] reading) per KiB of bodies, and sets the benchmark's bytes per op to the
// bodies' mean size.
func ReportCPUPerKiB(b *testing.B, start time.Duration, bodies [][]byte) {
	b.Helper()
	size := 0
	for _, body := range bodies {
		size += len(body)
	}
	if len(bodies) > 0 {
		b.SetBytes(int64(size / len(bodies)))
	}
	b.ReportMetric(float64((ProcessCPU()-start).Nanoseconds())/1e3/(float64(size)/1024), "cpu-µs/KiB")
}

// BenchRuntimeLargeBody publishes bodies (from [LargeBodies]) to queue on tr with the
// broker's confirmation, before the clock starts; then it times an app on tr with one
// worker consuming them, its handler reading the message with the data left as bytes,
// until every one is handled, and reports the process's CPU per KiB of body
// ([ReportCPUPerKiB]): the runtime's receive, decode, route and settle of large bodies
// on a real broker, client included.
func BenchRuntimeLargeBody(b *testing.B, tr transport.Transport, queue string, bodies [][]byte) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	msgs := make([]*transport.Message, 0, 64)
	flush := func() {
		if err := transport.PublishConfirmed(ctx, tr, msgs); err != nil {
			b.Fatalf("publish the large bodies: %v", err)
		}
		msgs = msgs[:0]
	}
	for _, body := range bodies {
		env, err := envelope.Decode(body)
		if err != nil {
			b.Fatal(err)
		}
		msgs = append(msgs, &transport.Message{Queue: queue, Body: body, Projection: transport.ProjectionOf(env)})
		if len(msgs) == cap(msgs) {
			flush()
		}
	}
	flush()
	app, err := babelqueue.New(tr, babelqueue.WithQueue(queue),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	app.Handle(LargeURN, func(_ context.Context, m *babelqueue.Message) error {
		if len(m.Envelope.Data) == 0 {
			b.Error("a large body without data")
		}
		if n.Add(1) == int64(len(bodies)) {
			close(done)
		}
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	start := ProcessCPU()
	go func() { errc <- app.Run(runCtx) }()
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("handled %d of %d large bodies", n.Load(), len(bodies))
	}
	b.StopTimer()
	ReportCPUPerKiB(b, start, bodies)
	stop()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}
