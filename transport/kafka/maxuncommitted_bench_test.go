package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/babelqueue-go/babelqueue/transport"
)

// BenchmarkMaxUncommitted weighs max_uncommitted's two sides on a fast consumer: the
// transport consuming 150 000 records of one partition (Receive, then Settle(Ack), as
// fast as it can) with windows of 5 000, 20 000 and 50 000 records, in turns (the order
// reversed every turn), each turn on a topic filled for it and timed from its
// first record. Every 5 ms a sampler reads the group's committed offset: the records
// handed out beyond it are what a kill at that instant redelivers. Each window reports
// its median rate and the most records it left exposed so (its duplicates bound, seen).
//
//	CI=true go test -run '^$' -bench MaxUncommitted -benchtime 3x ./transport/kafka/
func BenchmarkMaxUncommitted(b *testing.B) {
	const n = 150_000
	windows := []int{5000, 20000, 50000}
	type side struct {
		rates   []float64
		exposed int64
	}
	sides := make([]side, len(windows))
	adm := kadm.NewClient(rawClient(b))
	run := func(w int) {
		tr := openKafka(b, "max_uncommitted", fmt.Sprint(windows[w]))
		q := fill(b, "bqbench-window", n)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 64})
		if err != nil {
			b.Fatal(err)
		}
		var handed atomic.Int64
		stop := make(chan struct{})
		sampled := make(chan int64)
		go func() {
			var most int64
			for {
				select {
				case <-stop:
					sampled <- most
					return
				case <-time.After(5 * time.Millisecond):
				}
				h := handed.Load()
				offs, err := adm.FetchOffsets(ctx, tr.Group())
				if err != nil {
					continue
				}
				var committed int64
				if o, ok := offs.Lookup(q, 0); ok && o.Err == nil {
					committed = o.At
				}
				most = max(most, h-committed)
			}
		}()
		var start time.Time
		for i := range n {
			d, err := c.Receive(ctx)
			if err != nil {
				b.Fatalf("received %d of %d: %v", i, n, err)
			}
			if i == 0 {
				start = time.Now()
			}
			handed.Add(1)
			if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
				b.Fatal(err)
			}
		}
		took := time.Since(start)
		close(stop)
		sides[w].exposed = max(sides[w].exposed, <-sampled)
		sides[w].rates = append(sides[w].rates, n/took.Seconds())
		if err := c.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		for k := range windows {
			if i%2 == 0 {
				run(k)
			} else {
				run(len(windows) - 1 - k)
			}
		}
	}
	b.StopTimer()
	for w, s := range sides {
		slices.Sort(s.rates)
		b.ReportMetric(s.rates[len(s.rates)/2], fmt.Sprintf("window%d-records/s", windows[w]))
		b.ReportMetric(float64(s.exposed), fmt.Sprintf("window%d-most-uncommitted", windows[w]))
	}
}
