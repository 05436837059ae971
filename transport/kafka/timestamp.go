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
// than message.timestamp.before.max.ms. A retry, a dead letter, a delayed write or a
// redrive of a message created long ago would be deleted before anyone reads it, or
// refused for ever. Such a record is stamped with its write time instead (the envelope
// keeps created_at), and a warning says so.

// stampAfter is the age of created_at below which a record keeps it without a look at
// its topic: what is written fresh costs nothing.
const stampAfter = time.Minute

// stampTTL is how long a topic's timestamp limit is kept; stampRetry how long a failed
// read of it is, before the next record that needs it reads it again.
const (
	stampTTL   = 5 * time.Minute
	stampRetry = time.Minute
)

// stampRead bounds one read of a topic's configuration.
const stampRead = 5 * time.Second

// stampLimits caches, per topic, the age beyond which a record's timestamp is not kept.
type stampLimits struct {
	mu     sync.Mutex
	topics map[string]stampLimit
}

// stampLimit is a topic's limit: zero keeps every timestamp.
type stampLimit struct {
	limit   time.Duration
	expires time.Time
	warned  time.Time // the last warning of a record stamped with its write time
}

// warnDue reports whether a record of topic stamped with its write time is to be logged:
// the first of each minute.
func (s *stampLimits) warnDue(topic string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.topics[topic]
	if now.Sub(l.warned) < stampRetry {
		return false
	}
	l.warned = now
	s.topics[topic] = l
	return true
}

// timestamp returns the timestamp of a record of topic created at createdAt (Unix
// milliseconds; zero: unknown, the produce time): createdAt, or now when the topic would
// delete or refuse a record that old. A record is kept at least half the topic's
// retention, so one read late, or parked in a delay topic, is not deleted meanwhile.
func (t *Transport) timestamp(topic string, createdAt int64, now time.Time) time.Time {
	if createdAt <= 0 {
		return time.Time{}
	}
	at := time.UnixMilli(createdAt)
	if now.IsZero() {
		now = time.Now()
	}
	age := now.Sub(at)
	if age < stampAfter {
		return at
	}
	limit := t.stampLimit(topic, now)
	if limit <= 0 || age < limit {
		return at
	}
	if t.stamps.warnDue(topic, now) {
		t.log.Warn("kafka: a record is stamped with its write time, not its created_at: the topic deletes or refuses records that old by their timestamp (logged once a minute per topic)",
			"topic", topic, "created_at", at.UTC().Format(time.RFC3339), "limit", limit)
	}
	return now
}

// stampLimit returns the age beyond which a record of topic is stamped with its write
// time: half its retention.ms, or its message.timestamp.before.max.ms if lower; zero
// when the topic keeps every timestamp (LogAppendTime, no time limit) or its
// configuration cannot be read.
func (t *Transport) stampLimit(topic string, now time.Time) time.Duration {
	if t.prod == nil { // a transport of the unit tests: no broker to ask
		return 0
	}
	s := &t.stamps
	s.mu.Lock()
	if l, ok := s.topics[topic]; ok && now.Before(l.expires) {
		s.mu.Unlock()
		return l.limit
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.bg, stampRead)
	defer cancel()
	limit, err := t.readStampLimit(ctx, topic)
	ttl := stampTTL
	if err != nil {
		ttl = stampRetry
		t.log.Warn("kafka: cannot read the topic's retention; a record keeps its created_at as its timestamp, which a retention by time may delete early",
			"topic", topic, "err", err)
	}
	s.mu.Lock()
	if s.topics == nil {
		s.topics = map[string]stampLimit{}
	}
	s.topics[topic] = stampLimit{limit: limit, expires: now.Add(ttl), warned: s.topics[topic].warned}
	s.mu.Unlock()
	return limit
}

// readStampLimit reads the topic's timestamp settings, or the brokers' defaults while the
// topic does not exist yet (its first write creates it with them).
func (t *Transport) readStampLimit(ctx context.Context, topic string) (time.Duration, error) {
	adm := kadm.NewClient(t.prod) // never closed: closing it would close the producer
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, err
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return t.readBrokerStampLimit(ctx, adm)
	case err != nil:
		return 0, err
	}
	return stampLimitOf(rc.Configs, "message.timestamp.type", "message.timestamp.before.max.ms", "retention.ms"), nil
}

// readBrokerStampLimit is the limit of a topic created with the brokers' defaults: the
// lowest a broker reports.
func (t *Transport) readBrokerStampLimit(ctx context.Context, adm *kadm.Client) (time.Duration, error) {
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return 0, err
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx, brokers.NodeIDs()...)
	if err != nil {
		return 0, err
	}
	var lowest time.Duration
	for _, rc := range rcs {
		if rc.Err != nil {
			return 0, rc.Err
		}
		l := stampLimitOf(rc.Configs, "log.message.timestamp.type", "log.message.timestamp.before.max.ms",
			"log.retention.ms", "log.retention.minutes", "log.retention.hours")
		if l > 0 && (lowest == 0 || l < lowest) {
			lowest = l
		}
	}
	return lowest, nil
}

// stampLimitOf computes the limit from configs: typeKey, beforeKey, and the retention
// keys in the order Kafka reads them (the first set wins; in milliseconds, minutes,
// hours). A negative retention or an absent key keeps every timestamp.
func stampLimitOf(configs []kadm.Config, typeKey, beforeKey string, retention ...string) time.Duration {
	vals := map[string]string{}
	for _, c := range configs {
		if c.Value != nil {
			vals[c.Key] = *c.Value
		}
	}
	if vals[typeKey] == "LogAppendTime" {
		return 0
	}
	units := []time.Duration{time.Millisecond, time.Minute, time.Hour}
	var limit time.Duration
	for i, k := range retention {
		if v, ok := vals[k]; ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				limit = time.Duration(n) * units[i] / 2
			}
			break
		}
	}
	if v, ok := vals[beforeKey]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && n < int64(1<<63-1)/int64(time.Millisecond) {
			if b := time.Duration(n) * time.Millisecond; limit == 0 || b < limit {
				limit = b
			}
		}
	}
	return limit
}
