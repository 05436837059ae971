package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// ErrMissingTopic matches every [MissingTopicError].
var ErrMissingTopic = errors.New("kafka: topic missing")

// MissingTopicError is returned by Consume when a topic the consumer's settle writes need
// (its dead-letter and retry-tier delay topics) does not exist and the transport may not,
// or could not, create it. It matches [ErrMissingTopic].
type MissingTopicError struct {
	Queue  string   // the queue being consumed
	Topics []string // the missing topics
	Err    error    // why creating them failed; nil when auto-creation is off
}

// Error names the topics and what to do.
func (e *MissingTopicError) Error() string {
	msg := fmt.Sprintf("kafka: the topics %s that settle writes of queue %q go to do not exist", strings.Join(e.Topics, ", "), e.Queue)
	if e.Err == nil {
		return msg + " and auto_create_topics is off: create them, or turn auto_create_topics on"
	}
	return msg + " and cannot be created: " + e.Err.Error()
}

// Is makes the error match [ErrMissingTopic].
func (e *MissingTopicError) Is(target error) bool { return target == ErrMissingTopic }

// Unwrap returns why the topics could not be created.
func (e *MissingTopicError) Unwrap() error { return e.Err }

// settleTopics are the topics the settle writes of a consumer of queue go to, besides
// the queue itself.
func settleTopics(queue string, opts transport.ConsumeOptions) ([]string, error) {
	topics := slices.Clone(opts.SettleQueues)
	for _, d := range opts.SettleDelays {
		if d >= time.Millisecond {
			topics = append(topics, delayTopic(queue, d))
		}
	}
	for _, name := range topics {
		if err := checkTopic(name); err != nil {
			return nil, err
		}
	}
	return topics, nil
}

// prepareTopics creates the missing topics the settle writes of a consumer of queue go
// to when auto-creation is on, else returns a [*MissingTopicError].
func (t *Transport) prepareTopics(ctx context.Context, queue string, opts transport.ConsumeOptions) error {
	topics, err := settleTopics(queue, opts)
	if err != nil || len(topics) == 0 {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.deliveryTimeout)
	defer cancel()
	adm := kadm.NewClient(t.prod) // never closed: closing it would close the producer
	td, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("kafka: checking the topics that settle writes of queue %q go to: %w", queue, authCause(err))
	}
	var missing []string
	for _, name := range topics {
		if d, ok := td[name]; !ok || d.Err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if !t.cfg.autoCreate {
		return &MissingTopicError{Queue: queue, Topics: missing}
	}
	if err := t.createTopics(ctx, missing...); err != nil {
		return &MissingTopicError{Queue: queue, Topics: missing, Err: err}
	}
	t.log.Info("kafka: created the topics settle writes need", "queue", queue, "topics", missing)
	return nil
}

// createTopics creates topics with the broker's default partitions and replication; a
// topic that exists already is no error.
func (t *Transport) createTopics(ctx context.Context, topics ...string) error {
	resps, err := kadm.NewClient(t.prod).CreateTopics(ctx, -1, -1, nil, topics...)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range resps.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			errs = append(errs, fmt.Errorf("creating topic %q: %w", r.Topic, r.Err))
		}
	}
	return errors.Join(errs...)
}

// writeHold is how long a settle write that failed holds its record's partition back,
// by the failures to its topic in a row (Delay(n): the pause after the n-th).
var writeHold = driverkit.Backoff{Min: 250 * time.Millisecond, Max: 10 * time.Second}

// settleWriteFailed counts a failed settle write to topic, repairs what can be repaired
// (repair) and returns how many writes to topic failed in a row, and false for a failure
// during the hold the last one started (it counts for nothing new).
func (t *Transport) settleWriteFailed(ctx context.Context, topic string, err error) (int, bool) {
	v, _ := t.streaks.LoadOrStore(topic, &streak{})
	n, counted := v.(*streak).fail(time.Now())
	if needsRepair(err) {
		t.repair(ctx, topic, err)
	}
	return n, counted
}

// streak counts the settle writes to one topic that failed in a row.
type streak struct {
	mu   sync.Mutex
	n    int
	last time.Time
}

func (s *streak) fail(now time.Time) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 || now.Sub(s.last) >= writeHold.Delay(s.n) {
		s.n++
		s.last = now
		return s.n, true
	}
	return s.n, false
}

// settleWriteConfirmed ends the failure streak of topic.
func (t *Transport) settleWriteConfirmed(topic string) {
	if _, ok := t.streaks.Load(topic); ok {
		t.streaks.Delete(topic)
	}
}

// needsRepair reports whether a write failed for a reason the client can repair.
func needsRepair(err error) bool {
	return errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition)
}

// repairEvery bounds how often one topic is repaired (a repair drops its buffered records).
const repairEvery = time.Second

// repair acts on a write that failed because its topic is gone (UNKNOWN_TOPIC_ID: purge
// the deleted topic's id from the producer, then create it) or unknown
// (UNKNOWN_TOPIC_OR_PARTITION: create it), creating only with auto-creation on.
func (t *Transport) repair(ctx context.Context, topic string, err error) {
	t.repairMu.Lock()
	if time.Since(t.repaired[topic]) < repairEvery {
		t.repairMu.Unlock()
		return
	}
	t.repaired[topic] = time.Now()
	t.repairMu.Unlock()
	switch {
	case errors.Is(err, kerr.UnknownTopicID):
		t.log.Warn("kafka: a topic written to was deleted; forgetting its metadata so that the next write finds the topic again (or creates it)", "topic", topic, "err", err)
		t.prod.PurgeTopicsFromProducing(topic)
		t.seen.Delete(topic) // consumers refresh their metadata once it is written again
		if t.cfg.autoCreate {
			t.createMissing(ctx, topic)
		}
	case errors.Is(err, kerr.UnknownTopicOrPartition) && t.cfg.autoCreate:
		t.createMissing(ctx, topic)
	}
}

// createMissing creates topic, bounded by the delivery timeout, and logs the outcome.
func (t *Transport) createMissing(ctx context.Context, topic string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.deliveryTimeout)
	defer cancel()
	if err := t.createTopics(ctx, topic); err != nil {
		t.log.Warn("kafka: cannot create a missing topic; writes to it keep failing until it exists", "topic", topic, "err", err)
		return
	}
	t.log.Info("kafka: created a missing topic", "topic", topic)
}
