package babelqueue_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

type benchOrder struct {
	OrderID int    `json:"order_id"`
	SKU     string `json:"sku"`
}

// BenchmarkRuntime is publish + consume + handle + ack through the runtime on
// memory://, with 1 and 8 workers: every message is made, encoded, published, received,
// decoded, routed, handled and acknowledged.
func BenchmarkRuntime(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(map[int]string{1: "workers=1", 8: "workers=8"}[workers], func(b *testing.B) {
			app, err := babelqueue.New(memory.New(), babelqueue.WithQueue("bench"), babelqueue.WithConcurrency(workers),
				babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			done := make(chan struct{})
			target := int64(b.N)
			app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
				if n.Add(1) == target {
					close(done)
				}
				return nil
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- app.Run(ctx) }()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := app.Publish(ctx, "urn:babel:orders:created", benchOrder{OrderID: i, SKU: "A-1"}); err != nil {
					b.Fatal(err)
				}
			}
			<-done
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			cancel()
			<-errc
		})
	}
}

// BenchmarkChannelBaseline is the in-process limit: the same envelopes made and
// encoded, then handed over a Go channel to 1 or 8 goroutines that decode them.
func BenchmarkChannelBaseline(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(map[int]string{1: "workers=1", 8: "workers=8"}[workers], func(b *testing.B) {
			ch := make(chan []byte, 64)
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for body := range ch {
						if _, err := envelope.Decode(body); err != nil {
							panic(err)
						}
					}
				}()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				env, err := envelope.Make("urn:babel:orders:created", benchOrder{OrderID: i, SKU: "A-1"}, envelope.WithQueue("bench"))
				if err != nil {
					b.Fatal(err)
				}
				body, err := env.Encode()
				if err != nil {
					b.Fatal(err)
				}
				ch <- body
			}
			close(ch)
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkRuntimeConsume is the runtime's own cost per message, publish excluded: the
// messages wait on memory:// before the clock starts, then one (or eight) workers
// receive, decode, route, handle, decide and acknowledge them. cpu-µs/msg is the
// process's user+system CPU per message. The baseline is BenchmarkChannelConsume.
func BenchmarkRuntimeConsume(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(map[int]string{1: "workers=1", 8: "workers=8"}[workers], func(b *testing.B) {
			consumePreloaded(b, workers, benchBodies(b.N), func(app *babelqueue.App, handled func()) {
				app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
					handled()
					return nil
				})
			}, func(cpu cpuClock) { cpu.report(b) })
		})
	}
}

// BenchmarkRuntimeConsumeHalfFailing is BenchmarkRuntimeConsume with the handlers of
// the odd messages failing (max_attempts 3, dead-lettering on, a text logger at Info
// that discards): the runtime's failure path with no broker's cost beside it (decide,
// rewrite the body, write the retry or the dead letter, acknowledge). An op is one
// message: an even one is handled once, an odd one three times, so two deliveries a
// message.
func BenchmarkRuntimeConsumeHalfFailing(b *testing.B) {
	failing := errors.New("this handler fails")
	for _, workers := range []int{1, 8} {
		b.Run(map[int]string{1: "workers=1", 8: "workers=8"}[workers], func(b *testing.B) {
			consumePreloaded(b, workers, benchBodies(b.N), func(app *babelqueue.App, handled func()) {
				babelqueue.Handle(app, "urn:babel:orders:created", func(_ context.Context, o benchOrder, m *babelqueue.Message) error {
					if o.OrderID%2 == 0 {
						handled()
						return nil
					}
					if m.Attempts == 2 { // the last attempt: dead-lettered as it returns
						handled()
					}
					return failing
				})
			}, func(cpu cpuClock) { cpu.report(b) }, babelqueue.WithMaxAttempts(3), babelqueue.WithDeadLetter(true))
		})
	}
}

// consumePreloaded puts bodies on memory:// and times an app with workers workers
// consuming them: register installs the handlers, which call handled once per message.
// Once all are handled the timer stops and measure gets the CPU clock started with it,
// before the app stops.
func consumePreloaded(b *testing.B, workers int, bodies [][]byte, register func(app *babelqueue.App, handled func()), measure func(cpuClock), opts ...babelqueue.Option) {
	b.Helper()
	tr := memory.New()
	app, err := babelqueue.New(tr, append([]babelqueue.Option{babelqueue.WithQueue("bench"), babelqueue.WithConcurrency(workers),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	for _, body := range bodies {
		tr.Inject("bench", memory.Stored{Body: body})
	}
	var n atomic.Int64
	done := make(chan struct{})
	target := int64(len(bodies))
	register(app, func() {
		if n.Add(1) == target {
			close(done)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	cpu := startCPU()
	b.ReportAllocs()
	b.ResetTimer()
	go func() { errc <- app.Run(ctx) }()
	<-done
	b.StopTimer()
	measure(cpu)
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkChannelConsume is the baseline of BenchmarkRuntimeConsume: the same encoded
// envelopes, ready before the clock starts, handed over a Go channel to goroutines that
// decode them.
func BenchmarkChannelConsume(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(map[int]string{1: "workers=1", 8: "workers=8"}[workers], func(b *testing.B) {
			bodies := benchBodies(b.N)
			ch := make(chan []byte, 64)
			var wg sync.WaitGroup
			cpu := startCPU()
			b.ReportAllocs()
			b.ResetTimer()
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for body := range ch {
						if _, err := envelope.Decode(body); err != nil {
							panic(err)
						}
					}
				}()
			}
			for _, body := range bodies {
				ch <- body
			}
			close(ch)
			wg.Wait()
			b.StopTimer()
			cpu.report(b)
		})
	}
}

func benchBodies(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		env, err := envelope.Make("urn:babel:orders:created", benchOrder{OrderID: i, SKU: "A-1"}, envelope.WithQueue("bench"))
		if err != nil {
			panic(err)
		}
		if out[i], err = env.Encode(); err != nil {
			panic(err)
		}
	}
	return out
}

// cpuClock measures the process's user+system CPU time across a benchmark.
type cpuClock struct{ start time.Duration }

func startCPU() cpuClock { return cpuClock{start: transporttest.ProcessCPU()} }

func (c cpuClock) report(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "wall-µs/msg")
	b.ReportMetric(float64((transporttest.ProcessCPU()-c.start).Nanoseconds())/1e3/float64(b.N), "cpu-µs/msg")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkLargeBodyConsume is the runtime's cost per KiB of body on memory:// with 64
// KiB envelopes waiting on the queue, one worker: "raw" hands the handler the message
// (the data left as bytes), "typed" binds the data into a struct (babelqueue.Handle);
// the baseline decodes the same bodies on a bare channel (and, "baseline-bind", binds
// them too). cpu-µs/KiB is the process's CPU per KiB of body.
func BenchmarkLargeBodyConsume(b *testing.B) {
	const kib = 64
	report := func(b *testing.B, cpu cpuClock, bodies [][]byte) {
		transporttest.ReportCPUPerKiB(b, cpu.start, bodies)
	}
	for _, mode := range []string{"raw", "typed"} {
		b.Run("runtime/"+mode, func(b *testing.B) {
			bodies := transporttest.LargeBodies(b.N, kib, "bench")
			consumePreloaded(b, 1, bodies, func(app *babelqueue.App, handled func()) {
				if mode == "raw" {
					app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error { handled(); return nil })
					return
				}
				babelqueue.Handle(app, "urn:babel:orders:created", func(_ context.Context, d transporttest.LargeOrder, _ *babelqueue.Message) error {
					if len(d.Items) == 0 {
						b.Error("no items")
					}
					handled()
					return nil
				})
			}, func(cpu cpuClock) { report(b, cpu, bodies) })
		})
	}
	for _, mode := range []string{"decode", "bind"} {
		b.Run("baseline-"+mode, func(b *testing.B) {
			bodies := transporttest.LargeBodies(b.N, kib, "bench")
			cpu := startCPU()
			b.ReportAllocs()
			b.ResetTimer()
			ch := make(chan []byte, 64)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for body := range ch {
					env, err := envelope.Decode(body)
					if err != nil {
						panic(err)
					}
					if mode == "bind" {
						var d transporttest.LargeOrder
						if err := env.Bind(&d); err != nil {
							panic(err)
						}
					}
				}
			}()
			for _, body := range bodies {
				ch <- body
			}
			close(ch)
			<-done
			b.StopTimer()
			report(b, cpu, bodies)
		})
	}
}
