package kafka

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// A record's timestamp is its envelope's created_at (SPEC.md's transport table). A topic
// whose message.timestamp.type is CreateTime deletes a segment once its newest record is
// older than retention.ms, at the broker's next retention check (every
// log.retention.check.interval.ms, 5 minutes by default), and refuses a record older
// than message.timestamp.before.max.ms or further ahead than
// message.timestamp.after.max.ms (an hour by default since Kafka 4.0). A retry, a dead
// letter, a delayed write or a redrive of a message created long ago would be deleted
// before anyone reads it, and a message from a clock far ahead refused on every try. Such
// a record is stamped with its write time instead (the envelope keeps created_at), and a
// warning says so.

// stampAfter is how far created_at may be from now, either way, for a record to keep it
// without a look at its topic: what is written fresh costs nothing.
const stampAfter = time.Minute

// stampTTL is how long a topic's limits are kept; stampRetry how long a failed read of
// them is, before the next record that needs them reads them again. stampRetry is also
// the least time between two warnings of one topic.
const (
	stampTTL   = 5 * time.Minute
	stampRetry = time.Minute
)

// stampRead bounds one read of a topic's configuration.
const stampRead = 5 * time.Second

// stampLimits caches, per topic, how far from now a record's timestamp may be.
type stampLimits struct {
	epoch  time.Time // a reading of the clock with its monotonic part, for nowMs
	topics sync.Map  // topic → *stampEntry, replaced whole when read again

	warnMu sync.Mutex
	warned map[string]int64 // topic → the last warning of a record stamped with its write time (Unix ms)
}

// nowMs is the time in Unix milliseconds, from the monotonic clock (one clock read, where
// time.Now makes two): it misses a step of the wall clock since epoch, which the limits'
// margins of minutes absorb.
func (s *stampLimits) nowMs() int64 {
	return s.epoch.UnixMilli() + time.Since(s.epoch).Milliseconds()
}

// stampLimit is how far from now a topic keeps a record's timestamp: behind (in the
// past) and ahead (in the future); zero is no limit. Each is half the topic's own limit,
// so a record read late, or parked in a delay topic, is not deleted meanwhile, and a
// broker's clock a little off does not refuse it.
type stampLimit struct{ behind, ahead time.Duration }

type stampEntry struct {
	stampLimit
	expires int64 // Unix ms
}

// timestamp returns the timestamp of a record of topic created at createdAt (Unix
// milliseconds; zero: unknown, the produce time): createdAt, or the write time when the
// topic would delete or refuse a record stamped so. now is the write time when the caller
// has read the clock already, else zero. Reading the topic's limits, when it must, ends
// with ctx.
func (t *Transport) timestamp(ctx context.Context, topic string, createdAt int64, now time.Time) time.Time {
	if createdAt <= 0 {
		return time.Time{}
	}
	var nowMs int64
	if now.IsZero() {
		nowMs = t.stamps.nowMs()
	} else {
		nowMs = now.UnixMilli()
	}
	age := nowMs - createdAt // in ms: a created_at centuries away overflows no Duration
	if near := stampAfter.Milliseconds(); age < near && age > -near {
		return time.UnixMilli(createdAt)
	}
	l := t.stampLimit(ctx, topic, nowMs)
	behind, ahead := l.behind.Milliseconds(), l.ahead.Milliseconds()
	if age > 0 && (behind <= 0 || age < behind) || age < 0 && (ahead <= 0 || -age < ahead) {
		return time.UnixMilli(createdAt)
	}
	if t.stamps.warnDue(topic, nowMs) {
		t.log.Warn("kafka: a record is stamped with its write time, not its created_at: the topic deletes or refuses records stamped so (logged once a minute per topic)",
			"topic", topic, "created_at", time.UnixMilli(createdAt).UTC().Format(time.RFC3339), "behind", l.behind, "ahead", l.ahead)
	}
	return time.UnixMilli(nowMs)
}

// warnDue reports whether a record of topic stamped with its write time is to be logged:
// the first of each minute.
func (s *stampLimits) warnDue(topic string, nowMs int64) bool {
	s.warnMu.Lock()
	defer s.warnMu.Unlock()
	if last, ok := s.warned[topic]; ok && nowMs-last < stampRetry.Milliseconds() {
		return false
	}
	if s.warned == nil {
		s.warned = map[string]int64{}
	}
	s.warned[topic] = nowMs
	return true
}

// stampLimit returns topic's limits, read once in stampTTL (a read ends with ctx, or after
// stampRead); none when its configuration cannot be read. A read that ctx ended is not
// kept: the next record reads again.
func (t *Transport) stampLimit(ctx context.Context, topic string, nowMs int64) stampLimit {
	if e, ok := t.stamps.topics.Load(topic); ok && nowMs < e.(*stampEntry).expires {
		return e.(*stampEntry).stampLimit
	}
	if t.prod == nil { // a transport of the unit tests: no broker to ask
		return stampLimit{}
	}
	rctx, cancel := context.WithTimeout(ctx, stampRead)
	defer cancel()
	l, defaults, err := t.readStampLimit(rctx, topic)
	ttl := stampTTL
	if defaults {
		ttl = stampRetry // the topic is about to be created, or was a moment ago: look again soon
	}
	if err != nil && ctx.Err() != nil {
		return l // the caller's deadline, not the topic's: nothing learned
	}
	if err != nil {
		ttl = stampRetry
		t.log.Warn("kafka: cannot read the topic's timestamp settings; a record keeps its created_at as its timestamp, which the topic's retention may delete early",
			"topic", topic, "err", err)
	}
	t.stamps.topics.Store(topic, &stampEntry{stampLimit: l, expires: nowMs + ttl.Milliseconds()})
	return l
}

// readStampLimit reads the topic's timestamp settings, or the brokers' defaults while the
// broker does not know the topic yet (its first write creates it with them); defaults
// says which.
func (t *Transport) readStampLimit(ctx context.Context, topic string) (l stampLimit, defaults bool, err error) {
	adm := kadm.NewClient(t.prod) // never closed: closing it would close the producer
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return stampLimit{}, false, err
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		l, err = t.readBrokerStampLimit(ctx, adm)
		return l, true, err
	case err != nil:
		return stampLimit{}, false, err
	}
	return stampLimitOf(rc.Configs, ""), false, nil
}

// readBrokerStampLimit is the limit of a topic created with the brokers' defaults: the
// tightest a broker reports.
func (t *Transport) readBrokerStampLimit(ctx context.Context, adm *kadm.Client) (stampLimit, error) {
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return stampLimit{}, err
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx, brokers.NodeIDs()...)
	if err != nil {
		return stampLimit{}, err
	}
	var tight stampLimit
	for _, rc := range rcs {
		if rc.Err != nil {
			return stampLimit{}, rc.Err
		}
		l := stampLimitOf(rc.Configs, "log.")
		tight.behind, tight.ahead = tighter(tight.behind, l.behind), tighter(tight.ahead, l.ahead)
	}
	return tight, nil
}

// stampLimitOf computes the limits from a topic's configs (prefix "") or a broker's
// defaults (prefix "log."): half of the lowest of retention.ms (a broker reads
// log.retention.ms, else .minutes, else .hours) and message.timestamp.before.max.ms
// behind, half of message.timestamp.after.max.ms ahead; a topic of LogAppendTime keeps
// every timestamp. A negative or absent value is no limit.
func stampLimitOf(configs []kadm.Config, prefix string) stampLimit {
	vals := map[string]int64{}
	for _, c := range configs {
		if c.Value == nil {
			continue
		}
		if c.Key == prefix+"message.timestamp.type" {
			if *c.Value == "LogAppendTime" {
				return stampLimit{}
			}
			continue
		}
		if n, err := strconv.ParseInt(*c.Value, 10, 64); err == nil {
			vals[c.Key] = n
		}
	}
	ms := func(key string, unit time.Duration) time.Duration {
		n, ok := vals[key]
		switch {
		case !ok:
			return -1 // not set
		case n < 0 || n >= int64(1<<63-1)/int64(unit):
			return 0 // no limit
		}
		return time.Duration(n) * unit / 2
	}
	retention := ms(prefix+"retention.ms", time.Millisecond)
	if prefix != "" {
		if retention < 0 {
			retention = ms(prefix+"retention.minutes", time.Minute)
		}
		if retention < 0 {
			retention = ms(prefix+"retention.hours", time.Hour)
		}
	}
	return stampLimit{
		behind: tighter(max(retention, 0), max(ms(prefix+"message.timestamp.before.max.ms", time.Millisecond), 0)),
		ahead:  max(ms(prefix+"message.timestamp.after.max.ms", time.Millisecond), 0),
	}
}

// tighter returns the lower of two limits, zero being none.
func tighter(a, b time.Duration) time.Duration {
	if a <= 0 || b > 0 && b < a {
		return b
	}
	return a
}
