package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// A consumer opened with [transport.ConsumeOptions.Transactional] settles every Ack
// with writes in one Kafka transaction of its own producer's, which also commits the
// record's offset for the group (AddOffsetsToTxn, TxnOffsetCommit with the member's
// generation): the writes and the commit happen together or not at all. It hands out
// one record at a time (docs/transports/kafka.md, Transactional moves).

// defaultTxTimeout is how long the broker lets a transaction stay open (a process killed
// mid-move holds the target's read_committed consumers that long).
const defaultTxTimeout = 15 * time.Second

// txBeforeCommit, set by tests, runs before the end of the transaction; an error aborts it.
var txBeforeCommit atomic.Pointer[func(queue string) error]

// txAttempts bounds the transactions one settlement makes when they abort for a reason
// that passes (a rebalance, a coordinator moving).
const txAttempts = 5

// errTxOrder refuses a transactional settlement while an earlier record of its partition
// is unsettled.
var errTxOrder = errors.New("kafka: a transactional settlement must come after every earlier record of its partition is settled")

// errTxUnresolved is the cause of a settlement whose transaction's outcome is unknown.
var errTxUnresolved = errors.New("kafka: the move's transaction may or may not have committed and its outcome could not be read; the record is not delivered again by this consumer (a new consumer resumes from the group's committed offset)")

// txSettle is the transaction state of a transactional consumer.
type txSettle struct {
	// mu makes one transaction at a time: a producer has one open transaction.
	mu sync.Mutex
	cl *kgo.Client // the transactional producer
	id string      // its transactional id
	// build makes cl again, with its options (renew).
	build func() (*kgo.Client, error)
}

// txOutcome is how a transaction ended.
type txOutcome int

const (
	txAborted   txOutcome = iota // nothing of it is visible
	txCommitted                  // its writes and offset commit are
	txUnknown                    // a commit was attempted and its outcome is unknown
)

// txVersions caps TxnOffsetCommit at v4: the protocol before KIP-890 part 2, whatever the
// cluster's transaction.version, which the offset commit made here relies on.
func txVersions() *kversion.Versions {
	v := kversion.Stable()
	v.SetMaxKeyVersion(int16(kmsg.TxnOffsetCommit), 4)
	return v
}

// newTxSettle returns the transaction state of a consumer opened with opts, or nil.
func (c *consumer) newTxSettle(opts transport.ConsumeOptions) (*txSettle, error) {
	if !opts.Transactional {
		return nil, nil
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "babelqueue-tx-" + c.t.cfg.group + "-" + hex.EncodeToString(b[:])
	o := append(clientOpts(c.t.log),
		kgo.TransactionalID(id),
		kgo.TransactionTimeout(c.t.cfg.txTimeout),
		kgo.MaxVersions(txVersions()),
		kgo.ProducerLinger(0), // a move's writes are all produced at once: nothing to wait for
	)
	if c.t.cfg.autoCreate {
		o = append(o, kgo.AllowAutoTopicCreation())
	}
	cl, err := c.t.factory(o...)
	if err != nil {
		return nil, fmt.Errorf("kafka: transactional producer: %w", err)
	}
	return &txSettle{cl: cl, id: id, build: func() (*kgo.Client, error) { return c.t.factory(o...) }}, nil
}

// renew replaces a transactional producer whose transaction could not be ended (franz-go
// then refuses every BeginTransaction) with one of the same id, whose initialization
// aborts the old one's transaction. The caller holds x.mu.
func (x *txSettle) renew(log *slog.Logger, cause error) error {
	cl, err := x.build()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Initializing the producer id is what fences and aborts the old transaction.
		if _, _, err = cl.ProducerID(ctx); err != nil {
			cl.Close()
		}
	}
	if err != nil {
		log.Error("kafka: the transactional producer is stuck in a transaction and could not be replaced; moves fail until it is", "cause", cause, "err", err)
		return fmt.Errorf("kafka: replacing the transactional producer: %w", err)
	}
	log.Warn("kafka: replaced the transactional producer, whose transaction could not be ended; the broker aborted that transaction", "cause", cause)
	x.cl.Close()
	x.cl = cl
	return nil
}

// close closes the transactional producer; nil-safe.
func (x *txSettle) close() {
	if x != nil {
		x.cl.Close()
	}
}

// AckWrites settles rec with the writes ws in a transaction that also commits rec's
// offset for the group (driverkit.Config.AtomicAcks).
func (c *consumer) AckWrites(ctx context.Context, rec *record, ws []*transport.Message) error {
	recs, err := c.t.settleRecords(ctx, ws)
	if err != nil {
		return err
	}
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	c.mu.Lock()
	p := rec.p
	switch {
	case !rec.InHand(): // revoked meanwhile
		c.mu.Unlock()
		return c.takenBack
	case !p.First(rec):
		c.mu.Unlock()
		return &transport.SettleWriteError{Queue: ws[0].Queue, Err: errTxOrder}
	}
	c.lc.Offsets.Set(rec, driverkit.LogSettling)
	at := p.tp
	off := kgo.EpochOffset{Epoch: rec.r.LeaderEpoch, Offset: rec.r.Offset + 1}
	c.mu.Unlock()

	for attempt := 1; ; attempt++ {
		outcome, err := c.moveTx(ctx, recs, at, off)
		switch outcome {
		case txCommitted:
			for _, r := range recs {
				c.t.delivered(r.Topic)
			}
			c.mu.Lock()
			if rec.State == driverkit.LogSettling && c.lc.Owns(at, p) {
				c.ackLocked(rec)
				c.lc.Offsets.Committed(&p.LogPartition, off.Offset) // committed by the transaction: nothing for the commit loop
			} else {
				// Revoked while the transaction ran: it committed the offset with the
				// writes (the group's generation was still ours), so the new owner
				// starts after the record.
				c.lc.Offsets.Set(rec, driverkit.LogDropped)
			}
			c.mu.Unlock()
			return nil
		case txUnknown:
			c.mu.Lock()
			if rec.State == driverkit.LogSettling {
				// Not delivered again from here: it may be moved already. It stays
				// first in its partition, so nothing after it is committed either.
				c.lc.Offsets.Set(rec, driverkit.LogDropped)
			}
			c.mu.Unlock()
			c.log.Error("kafka: a move's transaction has an unknown outcome; the record is left to the group's committed offset",
				"topic", at.topic, "partition", at.partition, "offset", rec.r.Offset, "err", err)
			return &transport.SettleWriteError{Queue: ws[0].Queue, Err: fmt.Errorf("%w: %w", errTxUnresolved, err)}
		}
		c.mu.Lock()
		owned := rec.State == driverkit.LogSettling && c.lc.Owns(at, p)
		c.mu.Unlock()
		if !owned {
			return c.takenBack
		}
		retry := attempt < txAttempts && txRetriable(err) && ctx.Err() == nil
		if retry {
			c.log.Info("kafka: a move's transaction was aborted; trying again", "attempt", attempt, "err", err)
		}
		if !retry || txRetry.Wait(ctx, attempt) != nil {
			c.unsettle(rec)
			return &transport.SettleWriteError{Queue: ws[0].Queue, Err: err}
		}
	}
}

// unsettle hands rec back to its worker after a settlement that made nothing.
func (c *consumer) unsettle(rec *record) {
	c.mu.Lock()
	if rec.State == driverkit.LogSettling {
		c.lc.Offsets.Set(rec, driverkit.LogHanded)
	}
	c.mu.Unlock()
}

// txRetry is the backoff between the attempts of a move's transaction.
var txRetry = driverkit.Backoff{Min: 200 * time.Millisecond, Max: time.Second}

// txRetriable reports whether a transaction aborted for err may commit when tried again.
func txRetriable(err error) bool {
	for _, e := range []error{
		kerr.IllegalGeneration, kerr.RebalanceInProgress, kerr.UnknownMemberID,
		kerr.NotCoordinator, kerr.CoordinatorNotAvailable, kerr.CoordinatorLoadInProgress,
		kerr.ConcurrentTransactions, kerr.TransactionAbortable,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// moveTx makes one transaction: begin, produce recs, commit off for the partition at in
// it, end with a commit. It holds the commit lock from the offset commit to the end, so
// that no plain commit of an older offset lands after the transaction's.
func (c *consumer) moveTx(ctx context.Context, recs []*kgo.Record, at tp, off kgo.EpochOffset) (txOutcome, error) {
	cl := c.tx.cl
	if err := cl.BeginTransaction(); err != nil {
		// The producer is left in an unended transaction or its producer id is fenced:
		// a new one ends that and may begin.
		if rerr := c.tx.renew(c.log, err); rerr != nil {
			return txAborted, fmt.Errorf("kafka: begin transaction: %w", err)
		}
		cl = c.tx.cl
		if err := cl.BeginTransaction(); err != nil {
			return txAborted, fmt.Errorf("kafka: begin transaction: %w", err)
		}
	}
	// Not cancelled with ctx: franz-go cannot tell what a cancelled end did.
	end := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), c.t.cfg.deliveryTimeout)
	}
	abort := func(cause error) (txOutcome, error) {
		ectx, cancel := end()
		defer cancel()
		_ = cl.AbortBufferedRecords(ectx)
		c.endAborted(ectx, cl)
		return txAborted, cause
	}

	pctx, cancel := context.WithTimeout(ctx, c.t.cfg.deliveryTimeout)
	defer cancel()
	if r, err := cl.ProduceSync(pctx, recs...).First(); err != nil {
		return abort(&DeliveryError{Topic: r.Topic, Err: err})
	}

	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	if err := c.commitTxOffset(pctx, at, off); err != nil {
		return abort(err)
	}
	if hook := txBeforeCommit.Load(); hook != nil {
		if err := (*hook)(c.queue); err != nil {
			return abort(err)
		}
	}
	ectx, ecancel := end()
	defer ecancel()
	err := cl.EndTransaction(ectx, kgo.TryCommit)
	if err == nil {
		return txCommitted, nil
	}
	// Refused, not attempted or its answer lost: abort what may be open, then read the
	// group's offset (waiting while the transaction is pending) to learn the outcome.
	c.endAborted(ectx, cl)
	committed, rerr := c.txResolve(ectx, at, off.Offset)
	switch {
	case rerr != nil:
		return txUnknown, fmt.Errorf("kafka: end transaction: %w; reading the outcome: %w", err, rerr)
	case committed:
		return txCommitted, nil
	}
	return txAborted, fmt.Errorf("kafka: end transaction: %w", err)
}

// endAborted aborts cl's transaction, twice if need be (franz-go's remedy), else renews
// the producer, so that the next move can begin.
func (c *consumer) endAborted(ctx context.Context, cl *kgo.Client) {
	err := cl.EndTransaction(ctx, kgo.TryAbort)
	if err == nil {
		return
	}
	if err = cl.EndTransaction(ctx, kgo.TryAbort); err == nil {
		return
	}
	_ = c.tx.renew(c.log, fmt.Errorf("kafka: aborting a move's transaction: %w", err))
}

// commitTxOffset adds the group to the open transaction and commits off for the partition
// at in it, as the group member the consumer is now.
func (c *consumer) commitTxOffset(ctx context.Context, at tp, off kgo.EpochOffset) error {
	cl := c.tx.cl
	id, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("kafka: producer id: %w", err)
	}
	member, gen := c.cl.GroupMetadata()
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = c.tx.id, id, epoch, c.t.cfg.group
	if err := concurrentRetry.Retry(ctx, isConcurrent, func() error {
		resp, err := add.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	}); err != nil {
		return fmt.Errorf("kafka: add offsets to transaction: %w", err)
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = c.tx.id, c.t.cfg.group, id, epoch
	req.Generation, req.MemberID = gen, member
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = at.topic
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = at.partition, off.Offset, off.Epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return concurrentRetry.Retry(ctx, isConcurrent, func() error {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		seen := false
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if t.Topic == at.topic && p.Partition == at.partition {
					seen = true
				}
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return err
				}
			}
		}
		if !seen {
			return errors.New("kafka: the transactional offset commit's answer does not list the partition")
		}
		return nil
	})
}

// concurrentRetry is the backoff of a request the broker answers with
// CONCURRENT_TRANSACTIONS (the producer's previous transaction is still completing).
var concurrentRetry = driverkit.Backoff{Min: 10 * time.Millisecond, Max: 500 * time.Millisecond}

func isConcurrent(err error) bool { return errors.Is(err, kerr.ConcurrentTransactions) }

// txResolve reads the group's committed offset of the partition at, waiting while a
// transaction holds it pending, and reports whether it reached off.
func (c *consumer) txResolve(ctx context.Context, at tp, off int64) (bool, error) {
	adm := kadm.NewClient(c.tx.cl) // not closed: that would close the producer
	var reached bool
	err := driverkit.Backoff{Min: 250 * time.Millisecond, Max: 250 * time.Millisecond}.Retry(ctx, func(error) bool { return true }, func() error {
		resp, err := adm.FetchOffsetsForTopics(kadm.RequireStable(ctx), c.t.cfg.group, at.topic)
		if err != nil {
			return err
		}
		o, ok := resp.Lookup(at.topic, at.partition)
		if ok && o.Err != nil {
			return o.Err
		}
		reached = ok && o.At >= off
		return nil
	})
	return reached, err
}
