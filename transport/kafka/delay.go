package kafka

import (
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// maxReinject bounds the parked records re-produced in one pass.
const maxReinject = 500

// delayLoop moves parked records back to the queue when they are due; a failed write is
// retried a second later.
func (c *consumer) delayLoop() {
	defer c.wg.Done()
	driverkit.RunDue(c.ctx, c.delaySig, time.Second, c.due, c.reinject)
}

// due returns the parked records due at now (at most maxReinject, each partition's in due
// order) and when the next one is due.
func (c *consumer) due(now time.Time) (due []*record, next time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.lc.Parts {
		for _, pk := range p.delayed {
			if pk.due.After(now) {
				if next.IsZero() || pk.due.Before(next) {
					next = pk.due
				}
				break
			}
			if len(due) >= maxReinject {
				return due, now
			}
			due = append(due, pk.rec)
		}
	}
	return due, next
}

// reinject re-produces due parked records to the queue and settles those confirmed. It
// reports whether every write was confirmed.
func (c *consumer) reinject(due []*record) bool {
	recs := make([]*kgo.Record, len(due))
	for i, d := range due {
		recs[i] = c.reinjected(d.r)
	}
	ok := true
	errs := c.t.produceEach(c.ctx, recs)
	resume := map[string][]int32{}
	c.mu.Lock()
	for i, d := range due {
		if errs[i] != nil {
			ok = false
			if c.ctx.Err() == nil {
				c.log.Warn("kafka: moving a parked record back to its queue failed; retrying", "topic", d.r.Topic, "partition", d.r.Partition, "offset", d.r.Offset, "err", errs[i])
			}
			continue
		}
		p := d.p
		if d.State != driverkit.LogParked || !c.lc.Owns(p.tp, p) {
			continue // revoked meanwhile: the new owner moves it again
		}
		// Keep due order: only the head of the partition's parked records is settled;
		// a record behind a failed one stays parked and is written again later.
		if len(p.delayed) == 0 || p.delayed[0].rec != d {
			continue
		}
		p.delayed[0] = parked{}
		p.delayed = p.delayed[1:]
		d.State = driverkit.LogHanded
		c.ackLocked(d)
		if p.paused && len(p.delayed) <= resumeAt {
			p.paused = false
			resume[p.tp.topic] = append(resume[p.tp.topic], p.tp.partition)
		}
	}
	c.mu.Unlock()
	if len(resume) > 0 {
		c.cl.ResumeFetchPartitions(resume)
	}
	return ok
}

// reinjected is the copy of a parked record written back to its queue: same value, key,
// timestamp (unless its queue would delete one that old: timestamp.go) and headers,
// without the parking headers.
func (c *consumer) reinjected(r *kgo.Record) *kgo.Record {
	target := c.queue
	hs := make([]kgo.RecordHeader, 0, len(r.Headers))
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderDueAt:
		case HeaderOriginalTopic:
			if v := string(h.Value); v != "" && strings.HasPrefix(r.Topic, v+".delay.") {
				target = v
			}
		default:
			hs = append(hs, h)
		}
	}
	ts := c.t.timestamp(c.ctx, target, r.Timestamp.UnixMilli(), time.Time{}) // timestamp.go
	return &kgo.Record{Topic: target, Key: r.Key, Value: r.Value, Headers: hs, Timestamp: ts}
}
