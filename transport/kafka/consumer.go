package kafka

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// The consumer is the kit's ([driverkit.Consumer]); this file is Kafka's side: a poll
// loop fetches the records of the queue's partitions into a ready list, Receive hands
// them out in offset order, Ack moves the partition's commit mark past the settled
// records at its head (a commit loop commits it), a give-back seeks the partition back
// to the record, and the deliveries a seek or a revoke supersedes are taken back
// (docs/transports/kafka.md, Consuming and committing).

// pauseAt and resumeAt bound the parked records a consumer holds per delay partition.
const (
	pauseAt  = 512
	resumeAt = 128
)

type tp struct {
	topic     string
	partition int32
}

// partition is one assigned partition: the kit's bookkeeping and Kafka's own.
type partition struct {
	driverkit.LogPartition[*record]
	tp      tp
	tier    time.Duration // the delay of a delay topic; zero for the queue itself
	delayed []parked      // parked records, due order (delay topics only)
	paused  bool          // its fetching is paused: it holds pauseAt parked records
}

// record is one fetched record and its state: the kit's raw message (in slabs of slabSize).
type record struct {
	driverkit.LogEntry
	// What Decode hands out of r's headers, read on the polling goroutine (decode), so
	// that the first touch of a record's memory is not on the Receive path.
	hasAttempts bool // beside the entry's state: one word for both
	attempts    int
	schema      any
	headers     map[string]string
	r           *kgo.Record
	p           *partition // nil for a record never admitted (already fetched)
}

// LogOffset is the record's offset, for driverkit.Offsets.
func (rec *record) LogOffset() int64 { return rec.r.Offset }

// parked is a record of a delay topic waiting until due.
type parked struct {
	rec *record
	due time.Time
}

// consumer is Kafka's side of one consumer: the group member's client, its poll, commit
// and delay loops, and the bookkeeping of its partitions.
type consumer struct {
	t         *Transport
	queue     string
	cl        *kgo.Client
	pattern   *regexp.Regexp
	log       *slog.Logger
	kit       *driverkit.Consumer[*record]
	takenBack error              // what Settle of a revoked or superseded delivery returns
	ctx       context.Context    // lifetime of the background goroutines
	cancel    context.CancelFunc // ends ctx
	wg        sync.WaitGroup
	commitMu  sync.Mutex // serialises commits
	commitSig chan struct{}
	pollSig   chan struct{}
	delaySig  chan struct{}
	buffer    int // the records the poll loop aims to hold ready
	depth     int // pipelined settlements in flight beyond which the producer is hurried

	mu      sync.Mutex
	stopped bool // Close began: the loops are not started any more
	// lc is the bookkeeping of the partitions assigned: the marks, the rewinds, the
	// settle writes in flight and the uncommitted window (WithMaxUncommitted,
	// WithMaxUncommittedTime), and the Receive calls waiting.
	lc           driverkit.LogConsumer[*record, tp, *partition]
	ready        driverkit.Slabs[record] // the records waiting for Receive, which skips those no longer buffered
	pollCancel   context.CancelFunc
	batch        []record      // the rest of the current slab of record structs (poll loop only)
	commitQueued bool          // commitSig is signalled and the commit loop has not yet taken it
	urgentSig    chan struct{} // the uncommitted window is half full: commit without the pause

	tx *txSettle // transactional settlements (move.go); nil unless opened Transactional
}

// kitConsumer is what Consume returns: the kit's consumer, and SyncAcks.
type kitConsumer struct {
	*driverkit.Consumer[*record]
	c *consumer
}

var (
	_ transport.AckSyncer     = kitConsumer{}
	_ transport.AtomicSettler = kitConsumer{}
)

// Consume opens a consumer on queue and its delay topics: one member of the transport's
// consumer group. It first creates the topics its settle writes need, or returns a
// [*MissingTopicError]. It returns before the group is joined.
func (t *Transport) Consume(ctx context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	if err := checkTopic(queue); err != nil {
		return nil, err
	}
	if t.factory == nil {
		return nil, errors.New("kafka: this transport was built without a consumer factory")
	}
	if t.isClosed() {
		return nil, transport.ErrClosed
	}
	if err := t.prepareTopics(ctx, queue, opts); err != nil {
		return nil, err
	}
	if opts.Transactional {
		opts.Prefetch = 1 // move.go: one record at a time, so a transaction commits its offset
	}
	log := t.log.With("queue", queue, "group", t.cfg.group)
	c := newConsumer(t, queue, log, max(t.cfg.buffer, opts.Prefetch))
	cl, err := t.factory(append(clientOpts(t.log),
		kgo.ConsumerGroup(t.cfg.group),
		kgo.ConsumeRegex(),
		kgo.ConsumeTopics(c.pattern.String()),
		kgo.DisableAutoCommit(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), // no write of an open or aborted transaction (move.go)
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		kgo.MetadataMaxAge(t.cfg.metadataMaxAge),
		kgo.FetchMaxWait(fetchMaxWait),
		// A topic just created (the queue's first publish auto-creates it) can drop out
		// of a metadata answer for a while on a busy broker; a regex consumer purges a
		// topic missing for longer than this, revoking its partitions. Give it a minute
		// rather than franz-go's default 15 s.
		kgo.ConsiderMissingTopicDeletedAfter(time.Minute),
		kgo.SessionTimeout(t.cfg.sessionTimeout),
		kgo.HeartbeatInterval(t.cfg.heartbeatInterval),
	)...)
	if err != nil {
		return nil, err
	}
	c.cl = cl
	if c.tx, err = c.newTxSettle(opts); err != nil { // move.go
		cl.Close()
		return nil, err
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	k, err := driverkit.New[*record](c, driverkit.Config{
		Broker:     "kafka",
		Queue:      queue,
		Logger:     log,
		Group:      &t.consumers,
		AtomicAcks: c.tx != nil, // a transaction makes the writes and the offset commit (move.go)
		Pipeline:   t.cfg.pipelineSettles,
		// pipeline.go: the settlements made during the producer's linger and a round trip.
		PipelineDepth:     c.depth,
		ConfirmTimeout:    t.cfg.deliveryTimeout, // WriteAsync bounds its own wait with it too
		ConcurrentReceive: true,
	}, opts)
	if err != nil {
		c.cancel()
		cl.Close()
		c.tx.close()
		return nil, err
	}
	c.kit = k
	t.mu.Lock()
	t.live[c] = struct{}{}
	t.mu.Unlock()
	c.mu.Lock()
	if !c.stopped { // the transport's Close may have closed the consumer already
		c.wg.Add(3)
		go c.pollLoop()
		go c.commitLoop()
		go c.delayLoop()
	}
	c.mu.Unlock()
	return kitConsumer{Consumer: k, c: c}, nil
}

// newConsumer is the bookkeeping of a consumer of queue on t that aims to hold buffer
// records ready, before its client and loops.
func newConsumer(t *Transport, queue string, log *slog.Logger, buffer int) *consumer {
	c := &consumer{
		t:       t,
		queue:   queue,
		pattern: regexp.MustCompile(`^` + regexp.QuoteMeta(queue) + `(\.delay\.[0-9]+)?$`),
		log:     log,
		takenBack: &transport.TakenBackError{Broker: "kafka", Queue: queue,
			Reason: "its partition was revoked in a rebalance, or an earlier record of it was rewound", Err: ErrRevoked},
		commitSig: make(chan struct{}, 1),
		pollSig:   make(chan struct{}, 1),
		delaySig:  make(chan struct{}, 1),
		urgentSig: make(chan struct{}, 1),
		buffer:    buffer,
		depth:     pipeDepth * buffer,
	}
	// Records committed let go of their bodies (release).
	c.lc = driverkit.LogConsumer[*record, tp, *partition]{
		Offsets: driverkit.Offsets[*record]{MaxUncommitted: t.cfg.maxUncommitted, MaxUncommittedTime: t.cfg.maxUncommittedTime,
			Logger: log, Broker: "kafka", Passed: (*record).release},
		Parts:    map[tp]*partition{},
		PartOf:   func(rec *record) *partition { return rec.p },
		TakeBack: c.takeBackLocked,
	}
	return c
}

// fetchMaxWait is Kafka's fetch.max.wait.ms (franz-go's 5 s held a newly assigned
// delay or queue topic behind a fetch already waiting: issue 37).
const fetchMaxWait = 500 * time.Millisecond

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// pollLoop is the only goroutine that polls; rebalances are blocked from a poll until
// AllowRebalance, so records are admitted and seeks applied on a stable assignment.
func (c *consumer) pollLoop() {
	defer c.wg.Done()
	for {
		if c.ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		room := c.buffer - c.ready.Len()
		seek, hold := c.lc.SeekPlan(time.Now())
		c.mu.Unlock()
		if len(hold) > 0 {
			c.pauseHeld(hold)
		}
		if room < max(c.buffer/2, 1) && !seek {
			select {
			case <-c.pollSig:
			case <-c.ctx.Done():
				return
			}
			continue
		}
		pctx, cancel := context.WithCancel(c.ctx)
		c.mu.Lock()
		c.pollCancel = cancel
		if seek, hold = c.lc.SeekPlan(time.Now()); seek {
			cancel() // enter the poll only to seek
		}
		c.mu.Unlock()
		if len(hold) > 0 { // held since the first look: paused as those were
			c.pauseHeld(hold)
		}
		// Take everything franz-go has buffered: it starts the next fetch only once a
		// buffered fetch is drained, so taking part of one would leave the next fetch
		// (and its decoding) waiting until the ready list is nearly empty.
		fetches := c.cl.PollFetches(pctx)
		c.mu.Lock()
		c.pollCancel = nil
		c.mu.Unlock()
		cancel()
		if fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			c.log.Warn("kafka: fetch error", "topic", topic, "partition", p, "err", err)
		})
		// Admit the records in slabs, so that Receive may hand out one slab while the
		// next is admitted.
		delayed := false
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			tier := c.tierOf(fp.Topic)
			for rs := fp.Records; len(rs) > 0; {
				n := min(len(rs), slabSize)
				recs := c.slab(rs[:n], tier)
				c.mu.Lock()
				if c.admitLocked(tp{fp.Topic, fp.Partition}, tier, recs) {
					delayed = true
				}
				if c.ready.Len() > 0 {
					c.lc.Wake()
				}
				c.mu.Unlock()
				rs = rs[n:]
			}
		})
		c.apply(delayed)
		c.cl.AllowRebalance()
		if delayed {
			signal(c.delaySig)
		}
	}
}

// apply pauses the delay partitions that hold too many parked records and seeks the
// partitions whose rewind is due, resuming those that were held.
func (c *consumer) apply(delayed bool) {
	c.mu.Lock()
	if !delayed && !c.lc.SeekWanted() {
		c.mu.Unlock()
		return
	}
	var pause []tp
	for _, p := range c.lc.Parts {
		if delayed && p.tier > 0 && !p.paused && len(p.delayed) >= pauseAt {
			p.paused = true
			pause = append(pause, p.tp)
		}
	}
	due, held := c.lc.DueSeeks(time.Now())
	c.mu.Unlock()
	if len(pause) > 0 {
		c.cl.PauseFetchPartitions(byTopic(pause))
	}
	if len(due) == 0 {
		return
	}
	seeks := map[string]map[int32]kgo.EpochOffset{}
	for k, at := range due {
		if seeks[k.topic] == nil {
			seeks[k.topic] = map[int32]kgo.EpochOffset{}
		}
		seeks[k.topic][k.partition] = kgo.EpochOffset{Epoch: at.r.LeaderEpoch, Offset: at.r.Offset}
	}
	c.cl.SetOffsets(seeks)
	c.log.Debug("kafka: partitions sought back to rewound records", "offsets", seeks)
	c.mu.Lock()
	c.lc.Sought(due)
	c.mu.Unlock()
	if len(held) > 0 {
		c.cl.ResumeFetchPartitions(byTopic(held))
	}
}

// pauseHeld pauses the partitions in hold, resuming again one revoked meanwhile.
func (c *consumer) pauseHeld(hold []tp) {
	c.cl.PauseFetchPartitions(byTopic(hold))
	var stale []tp
	c.mu.Lock()
	for _, k := range hold {
		if p := c.lc.Parts[k]; p == nil || !p.Held() {
			stale = append(stale, k)
		}
	}
	c.mu.Unlock()
	if len(stale) > 0 {
		c.cl.ResumeFetchPartitions(byTopic(stale))
	}
}

// byTopic groups partitions by topic, as franz-go takes them.
func byTopic(keys []tp) map[string][]int32 {
	m := map[string][]int32{}
	for _, k := range keys {
		m[k.topic] = append(m[k.topic], k.partition)
	}
	return m
}

// slabSize is how many record structs the poll loop allocates and admits at once. It
// bounds what one record still referenced by the application keeps reachable.
const slabSize = 128

// slab returns the record structs of up to slabSize fetched records of one partition,
// with the headers of the queue's own records decoded. It touches no shared state, so
// the poll loop calls it without the lock.
func (c *consumer) slab(rs []*kgo.Record, tier time.Duration) []record {
	if len(c.batch) < len(rs) {
		c.batch = make([]record, slabSize)
	}
	recs := c.batch[:len(rs):len(rs)]
	c.batch = c.batch[len(rs):]
	for i, r := range rs {
		recs[i].r = r
		if tier == 0 {
			recs[i].decode()
		}
	}
	return recs
}

// admitLocked starts tracking a slab of fetched records of one partition: those of a
// delay topic are parked, the others join the ready list. Records fetched before a
// pending seek, or already fetched, are dropped. It reports whether any record was
// parked.
func (c *consumer) admitLocked(key tp, tier time.Duration, recs []record) bool {
	p := c.lc.Parts[key]
	if p == nil {
		p = &partition{LogPartition: driverkit.NewLogPartition[*record](), tp: key, tier: tier}
		c.lc.Parts[key] = p
	}
	if p.Seeking() {
		return false // fetched before the seek: they come again from the sought offset
	}
	isParked := false
	now := time.Time{}
	first := -1 // the first record admitted to the ready list
	for i := range recs {
		rec := &recs[i]
		st := driverkit.LogBuffered
		if p.tier > 0 {
			st = driverkit.LogParked
		}
		if !c.lc.Offsets.Admit(&p.LogPartition, rec, st) {
			continue // already fetched: skipped by Receive
		}
		rec.p = p
		if p.tier > 0 {
			if now.IsZero() {
				now = time.Now()
			}
			p.delayed = append(p.delayed, parked{rec, dueAt(rec.r, p.tier, now)})
			isParked = true
			continue
		}
		if first < 0 {
			first = i
		}
	}
	if first >= 0 {
		c.ready.Push(recs[first:])
	}
	return isParked
}

// tierOf returns the delay of a delay topic of the queue, zero for the queue itself.
func (c *consumer) tierOf(topic string) time.Duration {
	if topic == c.queue {
		return 0
	}
	ms, err := strconv.ParseInt(strings.TrimPrefix(topic, c.queue+".delay."), 10, 64)
	if err != nil || ms < 0 {
		return 0
	}
	return max(time.Duration(ms)*time.Millisecond, time.Millisecond)
}

// dueAt is when a parked record goes back to its queue: its bq-due-at header (else its
// timestamp plus the tier), clamped to [now, now+tier].
func dueAt(r *kgo.Record, tier time.Duration, now time.Time) time.Time {
	due := r.Timestamp.Add(tier)
	for _, h := range r.Headers {
		if h.Key == HeaderDueAt {
			if ms, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
				due = time.UnixMilli(ms)
			}
			break
		}
	}
	if due.Before(now) {
		return now
	}
	if lim := now.Add(tier); due.After(lim) {
		return lim
	}
	return due
}

// Receive hands out the next record of the ready list; it waits too while the consumer
// is as far ahead of its commits as it may be (driverkit.Offsets.Full).
func (c *consumer) Receive(ctx context.Context, into []*record) (int, error) {
	c.mu.Lock()
	for {
		if rec := c.nextLocked(); rec != nil {
			low := c.ready.Len() < max(c.buffer/2, 1)
			c.mu.Unlock()
			if low {
				signal(c.pollSig)
			}
			into[0] = rec
			return 1, nil
		}
		wake := c.lc.Wait()
		writing := c.lc.Offsets.Writing() > 0
		c.mu.Unlock()
		if writing {
			// Nothing to hand out while settle writes are in flight: they may be the
			// very records this consumer waits for (retries to its own queue), and
			// their records are committed only once they are confirmed, so they
			// need not wait out the producer's linger.
			c.t.hurry()
		}
		signal(c.pollSig)
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.kit.Done():
			return 0, transport.ErrClosed
		}
		c.mu.Lock()
	}
}

// nextLocked takes the next record and counts it in the uncommitted window; nil when
// none is ready or the window is full.
func (c *consumer) nextLocked() *record {
	rec, urgent, _ := c.lc.Next(c.ready.Pop)
	if urgent {
		signal(c.urgentSig)
	}
	return rec
}

// IsRetryable reports false: Receive fails only when its context ends or the consumer
// closes. franz-go retries failed fetches itself (logged by the poll loop).
func (c *consumer) IsRetryable(error) bool { return false }

// schemaOne is the common schema-version value, boxed once.
var schemaOne any = "1"

// isReserved reports whether name is one of the binding's own headers.
func isReserved(name string) bool {
	if len(name) < 6 || name[:3] != "bq-" {
		return false
	}
	switch name {
	case HeaderJob, HeaderTraceID, HeaderMessageID, HeaderSchemaVersion, HeaderSourceLang,
		HeaderAttempts, HeaderDueAt, HeaderOriginalTopic:
		return true
	}
	return false
}

// Decode hands out a record: its value (a tombstone's is empty), its key as it is (nil
// stays nil), and what decode read of its headers.
func (c *consumer) Decode(rec *record, d *transport.Delivery) {
	d.Body, d.Key = rec.r.Value, rec.r.Key
	if d.Body == nil {
		d.Body = []byte{}
	}
	d.Headers, d.SchemaVersion = rec.headers, rec.schema
	d.AttemptsHeader, d.HasAttemptsHeader = rec.attempts, rec.hasAttempts
}

// release lets go of a finished record's value, key and headers. Its struct lives on in
// a slab of slabSize records beside records still in use (and the poll loop's c.batch
// holds the slab being filled), and each kgo.Record's slices keep its fetch's
// decompressed buffer reachable: without this, a consumer of 64 KiB records kept up to
// a slab's worth of bodies (8 MiB) alive after they were settled. The record's topic,
// partition and offset stay for the logs.
func (rec *record) release() {
	rec.r.Value, rec.r.Key, rec.r.Headers = nil, nil, nil
	rec.headers, rec.schema = nil, nil
}

// decode reads the record's headers: the first bq-schema-version and bq-attempts
// headers (driverkit.Attempts), and the other headers but the binding's own (the first
// of a name wins).
func (rec *record) decode() {
	var seenSchema, seenAttempts bool
	for i := range rec.r.Headers {
		h := &rec.r.Headers[i]
		switch h.Key {
		case HeaderSchemaVersion:
			if !seenSchema {
				seenSchema = true
				switch {
				case h.Value == nil:
				case len(h.Value) == 1 && h.Value[0] == '1':
					rec.schema = schemaOne
				default:
					rec.schema = string(h.Value)
				}
			}
		case HeaderAttempts:
			if !seenAttempts {
				seenAttempts = true
				rec.attempts, rec.hasAttempts = driverkit.Attempts(h.Value)
			}
		default:
			if isReserved(h.Key) {
				continue
			}
			if rec.headers == nil {
				rec.headers = map[string]string{}
			}
			if _, dup := rec.headers[h.Key]; !dup {
				rec.headers[h.Key] = string(h.Value)
			}
		}
	}
}

// Ack marks rec settled and moves its partition's commit mark; a record dropped by a
// revoke or a rewind is a TakenBackError.
func (c *consumer) Ack(_ context.Context, rec *record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !rec.InHand() {
		return c.takenBack
	}
	c.ackLocked(rec)
	return nil
}

// GiveBack rewinds the records (after the partition's hold when a settle write
// failed); on Close nothing is needed: what is not committed is delivered again.
func (c *consumer) GiveBack(_ context.Context, recs []*record, why driverkit.Reason) error {
	if why == driverkit.Closing {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rec := range recs {
		if !rec.InHand() {
			return c.takenBack
		}
		c.rewindLocked(rec)
	}
	return nil
}

// takeBackLocked tells the kit that the records dropped are taken back.
func (c *consumer) takeBackLocked() {
	c.kit.TakeBack(func(r *record) bool { return r.State == driverkit.LogDropped }, c.takenBack)
}

// ackLocked marks rec settled and moves the partition's commit mark past every settled
// record at its head.
func (c *consumer) ackLocked(rec *record) {
	if c.lc.Ack(rec) && !c.commitQueued {
		c.commitQueued = true
		signal(c.commitSig)
	}
}

// rewindLocked drops rec and every later record of its partition and asks the poll loop
// to seek the partition back to rec.
func (c *consumer) rewindLocked(rec *record) {
	wait, ok := c.lc.Rewind(rec, time.Now())
	if !ok {
		return
	}
	if wait > 0 {
		time.AfterFunc(wait, c.kickPoll)
	}
	if c.pollCancel != nil {
		c.pollCancel()
	}
	signal(c.pollSig)
}

// kickPoll makes the poll loop look again at once (a held seek is due).
func (c *consumer) kickPoll() {
	c.mu.Lock()
	if c.pollCancel != nil {
		c.pollCancel()
	}
	c.mu.Unlock()
	signal(c.pollSig)
}

// commitRetry is the backoff of failed commits (whether or not records are settled
// meanwhile: a consumer stopped by its uncommitted window waits for them).
var commitRetry = driverkit.Backoff{Min: 250 * time.Millisecond, Max: 2 * time.Second}

// commitLoop commits settled offsets in the background, coalescing settles, at least
// commit_interval apart unless the uncommitted window is half full.
func (c *consumer) commitLoop() {
	defer c.wg.Done()
	driverkit.RunCoalesced(c.ctx, c.commitSig, c.urgentSig, c.t.cfg.commitInterval, commitRetry, c.log, "kafka: offset commit",
		func(ctx context.Context) error {
			c.mu.Lock()
			c.commitQueued = false // a settle from now on signals again
			c.mu.Unlock()
			return c.commit(ctx, nil)
		})
}

// commit commits the marks of the given partitions (all when only is nil) that moved
// since the last commit.
func (c *consumer) commit(ctx context.Context, only map[tp]bool) error {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	offsets := map[string]map[int32]kgo.EpochOffset{}
	c.mu.Lock()
	c.lc.Marks(only, func(k tp, m *record) {
		if offsets[k.topic] == nil {
			offsets[k.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[k.topic][k.partition] = kgo.EpochOffset{Epoch: m.r.LeaderEpoch, Offset: m.r.Offset + 1}
	})
	c.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	var rerr error
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		defer func() { c.lc.CommitDone(rerr) }()
		if err != nil {
			rerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, pr := range t.Partitions {
				if e := kerr.ErrorForCode(pr.ErrorCode); e != nil {
					if rerr == nil {
						rerr = e
					}
					continue
				}
				if eo, ok := offsets[t.Topic][pr.Partition]; ok {
					c.lc.Committed(tp{t.Topic, pr.Partition}, eo.Offset)
				}
			}
		}
	})
	return rerr
}

// revokeGrace bounds how long a revoke waits for the deliveries handed out from the
// revoked partitions to be settled.
const revokeGrace = 5 * time.Second

// revoked waits up to revokeGrace for the deliveries handed out from the revoked
// partitions (so that one acknowledged out of order is not settled again by the new
// owner), commits what was settled and forgets them.
func (c *consumer) revoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	only := partsOf(revoked)
	c.lc.AwaitHanded(&c.mu, only, revokeGrace, c.kit.Done())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.commit(ctx, only); err != nil {
		c.log.Warn("kafka: commit on revoke failed; settled records may be redelivered", "err", err)
	}
	c.forget(only, "revoked")
}

// lost forgets partitions lost without a clean revoke (session expiry): nothing can be
// committed for them any more.
func (c *consumer) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.forget(partsOf(lost), "lost")
}

func partsOf(m map[string][]int32) map[tp]bool {
	only := map[tp]bool{}
	for topic, ps := range m {
		for _, p := range ps {
			only[tp{topic, p}] = true
		}
	}
	return only
}

// forget drops the partitions' bookkeeping: their unsettled records are taken back and
// delivered again to whoever owns the partition next.
func (c *consumer) forget(parts map[tp]bool, why string) {
	var resume []tp
	c.mu.Lock()
	dropped := c.lc.Forget(parts, func(k tp, p *partition, seek *record) {
		if p.paused || p.Held() {
			resume = append(resume, k)
		}
		if seek != nil {
			c.log.Info("kafka: seek skipped, partition "+why+"; its new owner resumes from the committed offset", "topic", k.topic, "partition", k.partition, "offset", seek.r.Offset)
		}
	})
	c.mu.Unlock()
	if len(resume) > 0 {
		c.cl.ResumeFetchPartitions(byTopic(resume))
	}
	if dropped > 0 {
		c.log.Info("kafka: partitions "+why+" with unsettled records; they will be redelivered", "records", dropped)
	}
	signal(c.delaySig)
}

// Close stops the loops, commits what was settled and leaves the group. An error is the
// final commit's: settled records may then be delivered again.
func (c *consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	c.stopped = true
	if c.pollCancel != nil {
		c.pollCancel()
	}
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	err := c.commit(ctx, nil)
	c.cl.CloseAllowingRebalance()
	c.tx.close() // move.go
	c.t.mu.Lock()
	delete(c.t.live, c)
	c.t.mu.Unlock()
	if err != nil {
		return errors.Join(errFinalCommit, err)
	}
	return nil
}

// errFinalCommit heads the error of a Close whose final commit failed.
var errFinalCommit = errors.New("kafka: final commit failed; settled records may be redelivered")

// SyncAcks waits for the settle writes in flight, then commits, and waits for, the
// offsets of every record acknowledged so far.
func (k kitConsumer) SyncAcks(ctx context.Context) error {
	if err := k.c.lc.WaitIdle(ctx, &k.c.mu); err != nil {
		return err
	}
	return k.c.commit(ctx, nil)
}
