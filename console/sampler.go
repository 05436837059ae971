package console

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// sample is one count of a queue.
type sample struct {
	at time.Time
	transport.QueueStats
}

// ring keeps the last samples of one queue.
type ring struct {
	buf  []sample
	next int
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]sample, n)} }

func (r *ring) add(s sample) {
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// list returns the samples, oldest first.
func (r *ring) list() []sample {
	if !r.full {
		return append([]sample(nil), r.buf[:r.next]...)
	}
	return append(append([]sample(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}

// lastSample returns the last count of a queue, if there is one.
func (b *brokerState) lastSample(queue string) (sample, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.samples[queue]
	if r == nil || (r.next == 0 && !r.full) {
		return sample{}, false
	}
	return r.buf[(r.next+len(r.buf)-1)%len(r.buf)], true
}

// sampleLoop counts every queue now and then every sample interval, until Close.
func (c *Console) sampleLoop() {
	t := time.NewTicker(c.o.sample)
	defer t.Stop()
	for {
		done := make(chan struct{}, len(c.brokers))
		for _, b := range c.brokers {
			go func() {
				c.sampleBroker(b)
				done <- struct{}{}
			}()
		}
		for range c.brokers {
			<-done
		}
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleBroker counts the queues of one broker. A broker that fails is left alone
// until the next round, and its error is shown and logged once.
func (c *Console) sampleBroker(b *brokerState) {
	if _, ok := b.tr.(transport.QueueStatter); !ok {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, max(c.o.sample, 3*time.Second))
	defer cancel()
	b.mu.Lock()
	names := make([]string, 0, len(b.samples))
	for n := range b.samples {
		names = append(names, n)
	}
	b.mu.Unlock()
	sort.Strings(names)
	for _, name := range names {
		s, err := transport.Stats(ctx, b.tr, name)
		if err != nil {
			if c.ctx.Err() != nil {
				return
			}
			b.failed(c, err)
			return
		}
		b.mu.Lock()
		b.samples[name].add(sample{at: time.Now(), QueueStats: s})
		b.mu.Unlock()
	}
	b.failed(c, nil)
}

// failed records the outcome of a round: an error is logged when it first appears
// or changes, recovery once.
func (b *brokerState) failed(c *Console, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		if b.lastErr != "" {
			c.o.log.Info("console: broker answers again", "broker", b.name)
		}
		b.lastErr = ""
		return
	}
	msg := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		msg = "no answer within the sample interval"
	}
	if msg != b.lastErr {
		c.o.log.Warn("console: counting the queues of a broker failed", "broker", b.name, "err", msg)
	}
	b.lastErr, b.errAt = msg, time.Now()
}

// series is a queue's recent samples, for the chart: times in Unix ms, counts,
// and arrivals per second between samples where the broker counts them.
type series struct {
	T        []int64   `json:"t"`
	Ready    []int64   `json:"ready"`
	DLQ      []int64   `json:"dlq"`
	Arrivals []float64 `json:"arrivals,omitempty"`
}

// queueStatus is the overview of one work queue and its dead-letter queue.
type queueStatus struct {
	Name       string                `json:"name"`
	DLQ        string                `json:"dlq"`
	Stats      *transport.QueueStats `json:"stats,omitempty"`
	DLQStats   *transport.QueueStats `json:"dlq_stats,omitempty"`
	OldestAge  *float64              `json:"oldest_age_s,omitempty"` // of the oldest ready message, when the broker tells it
	Arrivals   *float64              `json:"arrivals_per_s,omitempty"`
	Change     *float64              `json:"change_per_s,omitempty"`
	DLQChange  *float64              `json:"dlq_change_per_s,omitempty"`
	Series     series                `json:"series"`
	CanBrowse  bool                  `json:"can_browse"`
	BrowseNote string                `json:"browse_note,omitempty"`
}

// brokerStatus is the overview of one broker.
type brokerStatus struct {
	ID       int           `json:"id"`
	Name     string        `json:"name"`
	CanCount bool          `json:"can_count"`
	Error    string        `json:"error,omitempty"`
	ErrorAt  *time.Time    `json:"error_at,omitempty"`
	Queues   []queueStatus `json:"queues"`
}

// rateWindow is the span the rates of the overview are measured over.
const rateWindow = time.Minute

func (c *Console) overview() []brokerStatus {
	out := make([]brokerStatus, 0, len(c.brokers))
	for _, b := range c.brokers {
		_, canCount := b.tr.(transport.QueueStatter)
		bs := brokerStatus{ID: b.id, Name: b.name, CanCount: canCount}
		b.mu.Lock()
		if b.lastErr != "" {
			at := b.errAt
			bs.Error, bs.ErrorAt = b.lastErr, &at
		}
		for _, q := range b.queues {
			work, dead := b.samples[q.Name].list(), b.samples[q.DLQ].list()
			qs := queueStatus{Name: q.Name, DLQ: q.DLQ, CanBrowse: !b.leavesMarks()}
			if !qs.CanBrowse {
				qs.BrowseNote = b.marksWarning()
			}
			if len(work) > 0 {
				last := work[len(work)-1].QueueStats
				qs.Stats = &last
				if age, ok := last.OldestAge(work[len(work)-1].at); ok {
					sec := age.Seconds()
					qs.OldestAge = &sec
				}
				qs.Arrivals = rate(work, func(s sample) int64 { return s.Appended })
				qs.Change = rate(work, func(s sample) int64 { return s.Ready })
			}
			if len(dead) > 0 {
				last := dead[len(dead)-1].QueueStats
				qs.DLQStats = &last
				qs.DLQChange = rate(dead, func(s sample) int64 { return s.Ready })
			}
			qs.Series = makeSeries(work, dead)
			bs.Queues = append(bs.Queues, qs)
		}
		b.mu.Unlock()
		out = append(out, bs)
	}
	return out
}

// rate is the change per second of a count over the last rateWindow of samples, or
// nil when it is unknown or there are not two samples.
func rate(ss []sample, count func(sample) int64) *float64 {
	if len(ss) < 2 {
		return nil
	}
	last := ss[len(ss)-1]
	first := last
	for i := len(ss) - 2; i >= 0 && last.at.Sub(ss[i].at) <= rateWindow; i-- {
		first = ss[i]
	}
	a, z := count(first), count(last)
	dt := last.at.Sub(first.at).Seconds()
	if a == transport.UnknownCount || z == transport.UnknownCount || dt <= 0 {
		return nil
	}
	r := float64(z-a) / dt
	return &r
}

// makeSeries lines the samples of a work queue and its dead-letter queue up (they
// are taken in the same rounds).
func makeSeries(work, dead []sample) series {
	var s series
	arrivals := len(work) > 0 && work[len(work)-1].Appended != transport.UnknownCount
	for i, w := range work {
		s.T = append(s.T, w.at.UnixMilli())
		s.Ready = append(s.Ready, w.Ready)
		d := int64(0)
		if j := len(dead) - len(work) + i; j >= 0 && j < len(dead) {
			d = dead[j].Ready
		}
		s.DLQ = append(s.DLQ, d)
		if arrivals {
			r := 0.0
			if i > 0 && w.Appended >= 0 && work[i-1].Appended >= 0 {
				if dt := w.at.Sub(work[i-1].at).Seconds(); dt > 0 {
					r = float64(w.Appended-work[i-1].Appended) / dt
				}
			}
			s.Arrivals = append(s.Arrivals, r)
		}
	}
	return s
}
