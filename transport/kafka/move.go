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
)

// A consumer opened with [transport.ConsumeOptions.Transactional] settles every Ack
// with writes in one Kafka transaction of its own: a transactional producer of the
// consumer's (transactional id "babelqueue-tx-<group>-<random>") produces the writes,
// commits the consumed record's offset for the consumer group inside the same
// transaction (AddOffsetsToTxn, then TxnOffsetCommit with the member's generation, so a
// member the group has moved on from cannot commit), and ends it with a commit. Either
// the writes become visible and the record's offset is committed, or neither happens: a
// process killed before the end leaves a transaction the broker aborts at its timeout.
// Every consumer of the transport reads committed records only, so an aborted write, or
// one in a transaction still open, is never delivered.
//
// A transactional consumer hands out one record at a time (its prefetch is 1), so the
// offset a transaction commits is always the one right after the record it settles.
// Each settlement costs a transaction (a few round trips and the broker's commit
// markers), so the runtime's consumers do not use it; a DLQ redrive does.

// defaultTxTimeout is the transaction timeout of a transactional consumer's producer:
// how long the broker lets a transaction stay open before it aborts it. A process killed
// in the middle of a move leaves its transaction open that long (plus the broker's check
// interval, transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by
// default): meanwhile the consumers of the target topic, reading committed records only,
// wait at the open transaction, and a consumer of the dead-letter topic that joins
// waits for the offset it holds.
const defaultTxTimeout = 15 * time.Second

// txBeforeCommit, set by tests, runs between the transactional offset commit and the
// end of the transaction with the consumer's queue; an error from it aborts the
// transaction instead.
var txBeforeCommit atomic.Pointer[func(queue string) error]

// txAttempts bounds the transactions one settlement makes when they are aborted for a
// reason that passes (a rebalance of the group, a coordinator moving).
const txAttempts = 5

// errTxOrder refuses a transactional settlement while an earlier record of the same
// partition is unsettled: its offset cannot be committed without skipping that record.
var errTxOrder = errors.New("kafka: a transactional settlement must come after every earlier record of its partition is settled")

// errTxUnresolved is the cause of a failed settlement whose transaction ended with a
// commit attempt of unknown outcome that could not be looked up.
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

// txVersions caps the transactional producer at TxnOffsetCommit v4, so that it uses the
// transaction protocol before KIP-890 part 2 (partitions and the group's offsets added
// to the transaction by explicit requests) whatever the cluster's transaction.version:
// the offset commit this file makes itself (franz-go keeps its own for
// GroupTransactSession) then needs no knowledge of which protocol the producer chose.
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

// renew replaces a transactional producer whose transaction could not be ended (its
// abort was refused, for one, because the broker fenced the producer): franz-go keeps
// such a producer in its transaction and refuses every later BeginTransaction. The new
// producer has the same transactional id, so when it initializes the coordinator
// aborts whatever transaction of the old one is still open, at once rather than at
// the transaction timeout. The caller holds x.mu.
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
// offset for the group: the kit calls it for every Ack with writes of a transactional
// consumer (Config.AtomicAcks).
func (c *consumer) AckWrites(ctx context.Context, rec *record, ws []*transport.Message) error {
	recs, err := c.t.settleRecords(ws)
	if err != nil {
		return err
	}
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	c.mu.Lock()
	p := rec.p
	switch {
	case !inHand(rec): // revoked meanwhile
		c.mu.Unlock()
		return c.takenBack
	case p.pending.len() == 0 || p.pending.front() != rec:
		c.mu.Unlock()
		return &transport.SettleWriteError{Queue: ws[0].Queue, Err: errTxOrder}
	}
	c.setLocked(rec, stSettling)
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
			if rec.state == stSettling && c.parts[at] == p {
				c.ackLocked(rec)
				c.committedLocked(p, off.Offset) // committed by the transaction: nothing for the commit loop
			} else {
				// Revoked while the transaction ran: it committed the offset with the
				// writes (the group's generation was still ours), so the new owner
				// starts after the record.
				c.setLocked(rec, stDropped)
			}
			c.mu.Unlock()
			return nil
		case txUnknown:
			c.mu.Lock()
			if rec.state == stSettling {
				// Not delivered again from here: it may be moved already. It stays
				// first in its partition, so nothing after it is committed either.
				c.setLocked(rec, stDropped)
			}
			c.mu.Unlock()
			c.log.Error("kafka: a move's transaction has an unknown outcome; the record is left to the group's committed offset",
				"topic", at.topic, "partition", at.partition, "offset", rec.r.Offset, "err", err)
			return &transport.SettleWriteError{Queue: ws[0].Queue, Err: fmt.Errorf("%w: %w", errTxUnresolved, err)}
		}
		c.mu.Lock()
		owned := rec.state == stSettling && c.parts[at] == p
		c.mu.Unlock()
		if !owned {
			return c.takenBack
		}
		if attempt >= txAttempts || !txRetriable(err) || ctx.Err() != nil {
			c.unsettle(rec)
			return &transport.SettleWriteError{Queue: ws[0].Queue, Err: err}
		}
		c.log.Info("kafka: a move's transaction was aborted; trying again", "attempt", attempt, "err", err)
		select {
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		case <-ctx.Done():
			c.unsettle(rec)
			return &transport.SettleWriteError{Queue: ws[0].Queue, Err: err}
		}
	}
}

// unsettle hands rec back to its worker after a settlement that made nothing.
func (c *consumer) unsettle(rec *record) {
	c.mu.Lock()
	if rec.state == stSettling {
		c.setLocked(rec, stHanded)
	}
	c.mu.Unlock()
}

// txRetriable reports whether a transaction aborted for err may commit when tried
// again: the group was rebalancing, the coordinator moved or was loading, or the
// previous transaction was still being completed.
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

// moveTx makes one transaction: begin, produce recs, add the group's offsets to the
// transaction, commit off for the partition at, end with a commit. It holds the
// consumer's commit lock from the offset commit to the end, so that no plain commit of
// an older offset, sent before, lands after the transaction's.
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
	// Ending a transaction is not cancelled with the caller's ctx: franz-go cannot tell
	// what a cancelled end did.
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
	done := make(chan error, len(recs))
	for _, r := range recs {
		cl.Produce(pctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				err = &DeliveryError{Topic: r.Topic, Err: err}
			}
			done <- err
		})
	}
	var perr error
	for range recs {
		select {
		case err := <-done:
			if err != nil && perr == nil {
				perr = err
			}
		case <-pctx.Done():
			if perr == nil {
				perr = &DeliveryError{Topic: recs[0].Topic, Err: pctx.Err()}
			}
		}
		if pctx.Err() != nil {
			break
		}
	}
	if perr != nil {
		return abort(perr)
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
	// The commit was refused, not attempted, or its answer lost. Abort what may still
	// be open (franz-go reloads the producer id, which fences the transaction off),
	// then read the group's offset, waiting while the transaction is pending: it says
	// whether the commit happened.
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

// endAborted ends cl's transaction with an abort. franz-go's documented remedy for an
// abort that fails is one more (it heals an end whose outcome was unconfirmed); when
// that fails too, the producer is replaced (txSettle.renew), which aborts the
// transaction on the broker. Either way the next move can begin.
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

// commitTxOffset adds the group's offsets to the open transaction and commits off for
// the partition at inside it, as the group member the consumer is now.
func (c *consumer) commitTxOffset(ctx context.Context, at tp, off kgo.EpochOffset) error {
	cl := c.tx.cl
	id, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("kafka: producer id: %w", err)
	}
	member, gen := c.cl.GroupMetadata()
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = c.tx.id, id, epoch, c.t.cfg.group
	if err := retryConcurrent(ctx, func() error {
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
	return retryConcurrent(ctx, func() error {
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

// retryConcurrent runs fn again while the broker answers CONCURRENT_TRANSACTIONS (the
// previous transaction of the producer is still being completed), until ctx ends.
func retryConcurrent(ctx context.Context, fn func() error) error {
	wait := 10 * time.Millisecond
	for {
		err := fn()
		if !errors.Is(err, kerr.ConcurrentTransactions) {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// txResolve reads the group's committed offset of the partition at, waiting while a
// transaction holds it pending, and reports whether it reached off.
func (c *consumer) txResolve(ctx context.Context, at tp, off int64) (bool, error) {
	adm := kadm.NewClient(c.tx.cl) // not closed: that would close the producer
	for {
		resp, err := adm.FetchOffsetsForTopics(kadm.RequireStable(ctx), c.t.cfg.group, at.topic)
		if err == nil {
			o, ok := resp.Lookup(at.topic, at.partition)
			switch {
			case !ok:
				return false, nil
			case o.Err == nil:
				return o.At >= off, nil
			}
			err = o.Err
		}
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return false, err
		}
	}
}
