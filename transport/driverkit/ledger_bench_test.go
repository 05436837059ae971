package driverkit_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// BenchmarkLedger is one delivery's bookkeeping through the ledger: a slot, the hand-out,
// Begin and Finish of an Ack.
func BenchmarkLedger(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(map[int]string{1: "workers=1", 8: "workers=8"}[workers], func(b *testing.B) {
			l := driverkit.NewLedger[int](driverkit.LedgerConfig{Broker: "bench", Prefetch: workers, Logger: slog.New(slog.DiscardHandler)})
			ctx := context.Background()
			s := transport.Settlement{Outcome: transport.Ack}
			b.ReportAllocs()
			b.SetParallelism(max(workers/2, 1))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					d, err := l.Receive(ctx, func(context.Context) (*transport.Delivery, error) {
						e, err := l.Hand(1)
						return &transport.Delivery{Handle: e}, err
					})
					if err != nil {
						b.Fatal(err)
					}
					sink.Store(d)
					e, err := l.Begin(d, s)
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Finish(e, s, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

var sink atomic.Pointer[transport.Delivery]

// BenchmarkChannelBaseline is the bookkeeping drivers had before the ledger: a buffered
// channel as the prefetch semaphore and an atomic settle-once flag per delivery.
func BenchmarkChannelBaseline(b *testing.B) {
	type handle struct {
		v       int
		settled atomic.Bool
	}
	for _, workers := range []int{1, 8} {
		b.Run(map[int]string{1: "workers=1", 8: "workers=8"}[workers], func(b *testing.B) {
			slots := make(chan struct{}, workers)
			ctx := context.Background()
			b.ReportAllocs()
			b.SetParallelism(max(workers/2, 1))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					select {
					case slots <- struct{}{}:
					case <-ctx.Done():
						b.Fatal(ctx.Err())
					}
					d := &transport.Delivery{Handle: &handle{v: 1}}
					sink.Store(d) // the delivery goes to the runtime, as in a driver
					h := d.Handle.(*handle)
					if !h.settled.CompareAndSwap(false, true) {
						b.Fatal("settled twice")
					}
					<-slots
				}
			})
		})
	}
}
