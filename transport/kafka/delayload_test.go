package kafka_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// burnCPU keeps every core busy until the test ends: the machine under the load of a
// whole test suite, for the broker as much as for this process.
func burnCPU(t *testing.T) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := range 1 << 16 {
					x ^= i * 31
				}
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// topicClock notes, per topic, when a record was first confirmed on it, when a consumer
// was first assigned its partition and when a consumer first read records of it: the
// steps a delayed message takes through topics that did not exist before.
type topicClock struct {
	mu                            sync.Mutex
	appended, assigned, firstRead map[string]time.Time
}

func newTopicClock() *topicClock {
	return &topicClock{appended: map[string]time.Time{}, assigned: map[string]time.Time{}, firstRead: map[string]time.Time{}}
}

func (c *topicClock) note(m map[string]time.Time, topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := m[topic]; !ok {
		m[topic] = time.Now()
	}
}

// OnProduceRecordUnbuffered is the producer's hook: a record confirmed (or failed).
func (c *topicClock) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err == nil {
		c.note(c.appended, r.Topic)
	}
}

// OnFetchBatchRead is the consumers' hook: a batch of records read.
func (c *topicClock) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.FetchBatchMetrics) {
	if m.NumRecords > 0 {
		c.note(c.firstRead, topic)
	}
}

func (c *topicClock) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	for topic := range assigned {
		c.note(c.assigned, topic)
	}
}

// phases returns, for topic, how long the broker took from the first publish to it
// (published) to confirm a record on it (the topic's creation), how long consumers then
// took to be assigned its partition (metadata and a group rebalance; 0 when they had it
// before the record), and the fetch wait.
func (c *topicClock) phases(topic string, published time.Time) (create, assign time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	app, ok1 := c.appended[topic]
	asg, ok2 := c.assigned[topic]
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	return app.Sub(published), max(asg.Sub(app), 0), true
}

// fetchWait is how long a consumer took to read the first records of topic once it was
// both assigned the partition and the records were there.
func (c *topicClock) fetchWait(topic string) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	app, ok1 := c.appended[topic]
	asg, ok2 := c.assigned[topic]
	read, ok3 := c.firstRead[topic]
	if !ok1 || !ok2 || !ok3 {
		return 0, false
	}
	return read.Sub(later(app, asg)), true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestDelayFreshTopicsUnderLoad delays messages onto delay topics no one wrote before
// (each queue new as well, so the message's way back lands on a new topic too), with
// every core busy, and follows each topic: created, assigned, first read. A consumer
// must read new partitions' records within fetchBound (median) of having both (franz-go's
// default fetch wait of 5 s held a new partition behind a fetch already waiting on the
// others: 5.5 s late on average, twice for a fresh queue), and every message must come
// back within lateBound of when it was due. The transport keeps the default metadata
// refresh (10 s), as an application does.
func TestDelayFreshTopicsUnderLoad(t *testing.T) {
	const (
		queues     = 6
		perQueue   = 3
		fetchBound = 4 * time.Second
		lateBound  = 15 * time.Second
	)
	burnCPU(t)
	clock := newTopicClock()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds(t)...), kgo.AllowAutoTopicCreation(),
		kgo.MetadataMinAge(250*time.Millisecond), kgo.WithHooks(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	factory := kafka.Factory(kgo.SeedBrokers(seeds(t)...), kgo.WithHooks(clock), kgo.OnPartitionsAssigned(clock.onAssigned))
	tr, err := kafka.New(prod, factory, kafka.WithGroup(transporttest.UniqueName("bqtest-delayload")), kafka.WithConfirmedPublish(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})

	var (
		mu    sync.Mutex
		due   = map[string]time.Time{} // body -> when it is due
		late  []time.Duration
		wg    sync.WaitGroup
		fresh []string                 // the topics the test made appear
		sent  = map[string]time.Time{} // delay topic -> when its record was published
	)
	for qi := range queues {
		q := newTopic(t, "bqtest-delayload")
		c := consumeOn(t, tr, q, perQueue)
		fresh = append(fresh, q)
		for i := range perQueue {
			d := time.Duration(500+100*qi+10*i) * time.Millisecond // a delay topic of its own
			body := fmt.Sprintf(`{"q":%d,"i":%d}`, qi, i)
			topic := fmt.Sprintf("%s.delay.%d", q, d.Milliseconds())
			fresh = append(fresh, topic)
			mu.Lock()
			sent[topic] = time.Now()
			due[body] = sent[topic].Add(d)
			mu.Unlock()
			publishOK(t, tr, &transport.Message{Queue: q, Body: []byte(body), Delay: d})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perQueue {
				rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
				got, err := c.Receive(rctx)
				rcancel()
				if err != nil {
					t.Errorf("%s: a delayed message did not come back: %v", q, err)
					return
				}
				mu.Lock()
				l := time.Since(due[string(got.Body)])
				late = append(late, l)
				mu.Unlock()
				if l > lateBound {
					t.Errorf("%s: a delayed message came back %s after it was due (bound %s)", q, l.Round(time.Millisecond), lateBound)
				}
				sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
				if err := c.Settle(sctx, got, transport.Settlement{Outcome: transport.Ack}); err != nil {
					t.Errorf("Settle: %v", err)
				}
				scancel()
			}
		}()
	}
	wg.Wait()

	var waits []time.Duration
	for _, topic := range fresh {
		w, ok := clock.fetchWait(topic)
		if !ok {
			t.Errorf("%s: never written, assigned and read", topic)
			continue
		}
		waits = append(waits, w)
		if w > fetchBound {
			kind := "delay topic"
			if !strings.Contains(topic, ".delay.") {
				kind = "queue"
			}
			t.Logf("%s (%s): its first records were read %s after the consumer had both the partition and the records",
				topic, kind, w.Round(time.Millisecond))
		}
	}
	// The median, not each topic: a loaded CI machine may hold one read back, while the
	// 5 s long poll this guards against held back nearly every one (median 5.5 s).
	if m := median(waits); m > fetchBound {
		t.Errorf("a new partition's first records were read a median %s after the consumer had both the partition and the records (bound %s)",
			m.Round(time.Millisecond), fetchBound)
	}
	var creates, assigns []time.Duration
	for topic, at := range sent {
		if cr, as, ok := clock.phases(topic, at); ok {
			creates, assigns = append(creates, cr), append(assigns, as)
		}
	}
	t.Logf("%d delayed messages through %d new topics, every core busy: late by %s; a new delay topic's first record confirmed after %s, "+
		"its partition assigned %s later, a new partition's first records read %s after that",
		len(late), len(fresh), spread(late), spread(creates), spread(assigns), spread(waits))
}

// median is the middle of ds (0 for none); it sorts ds.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// spread is the median and the largest of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "nothing"
	}
	m := median(ds)
	return fmt.Sprintf("median %s (max %s)", m.Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
}
