package kafka

import (
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// maxReinject bounds the parked records re-produced in one pass.
const maxReinject = 500

// delayLoop moves parked records back to the queue when they are due. A parked record is
// committed only after its copy on the queue is confirmed; a failed write is retried.
func (c *consumer) delayLoop() {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	backoff := time.Duration(0)
	for {
		now := time.Now()
		var due []*record
		next := time.Time{}
		c.mu.Lock()
		for _, p := range c.parts {
			for _, pk := range p.delayed {
				if pk.due.After(now) {
					if next.IsZero() || pk.due.Before(next) {
						next = pk.due
					}
					break
				}
				if len(due) >= maxReinject {
					next = now
					break
				}
				due = append(due, pk.rec)
			}
		}
		c.mu.Unlock()
		if len(due) > 0 && backoff == 0 {
			if c.reinject(due) {
				continue
			}
			backoff = time.Second
		}
		wait := time.Hour
		if backoff > 0 {
			wait = backoff
		} else if !next.IsZero() {
			wait = time.Until(next)
		}
		timer.Reset(max(wait, 0))
		select {
		case <-timer.C:
			backoff = 0
		case <-c.delaySig:
		case <-c.ctx.Done():
			return
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
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
		if d.state != stDelayed || c.parts[p.tp] != p {
			continue // revoked meanwhile: the new owner moves it again
		}
		// Keep due order: only the head of the partition's parked records is settled;
		// a record behind a failed one stays parked and is written again later.
		if len(p.delayed) == 0 || p.delayed[0].rec != d {
			continue
		}
		p.delayed[0] = parked{}
		p.delayed = p.delayed[1:]
		d.state = stHanded
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
// timestamp and headers, without the parking headers.
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
	return &kgo.Record{Topic: target, Key: r.Key, Value: r.Value, Headers: hs, Timestamp: r.Timestamp}
}
