package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// committedValues reads topic from the start as a read_committed consumer for quiet and
// returns the values it sees.
func committedValues(t testing.TB, topic string, quiet time.Duration) []string {
	t.Helper()
	return topicValues(t, topic, quiet, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
}

// groupOffset is the offset group has committed for partition 0 of topic, -1 for none.
func groupOffset(t testing.TB, group, topic string) int64 {
	t.Helper()
	adm := kadm.NewClient(rawClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Stable: a transaction's offset commit may still be pending right after it ended.
	var resp kadm.OffsetResponses
	err := whileCoordinatorMoves(ctx, func() (err error) {
		resp, err = adm.FetchOffsetsForTopics(kadm.RequireStable(ctx), group, topic)
		return err
	})
	if err != nil {
		t.Fatalf("offsets of group %s: %v", group, err)
	}
	o, ok := resp.Lookup(topic, 0)
	if !ok || o.Err != nil {
		return -1
	}
	return o.At
}

// browseBodies browses queue and returns the bodies waiting on it.
func browseBodies(t testing.TB, tr transport.Transport, queue string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []string
	if err := transport.BrowseAll(ctx, tr, queue, 100, func(d *transport.Delivery) bool {
		out = append(out, string(d.Body))
		return true
	}); err != nil {
		t.Fatalf("browse %s: %v", queue, err)
	}
	return out
}

// consumeTx opens a transactional consumer of queue and checks that it says so.
func consumeTx(t testing.TB, tr transport.Transport, queue string, settleQueues ...string) transport.Consumer {
	t.Helper()
	c, err := tr.Consume(context.Background(), queue, transport.ConsumeOptions{Prefetch: 8, SettleQueues: settleQueues, Transactional: true})
	if err != nil {
		t.Fatalf("Consume(%s, Transactional): %v", queue, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	if !transport.SettlesAtomically(c) {
		t.Fatal("a Kafka consumer opened Transactional does not report SettlesAtomically")
	}
	return c
}

func receiveOK(t testing.TB, c transport.Consumer) *transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return d
}

func moveTo(queue string, d *transport.Delivery) transport.Settlement {
	return transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: queue, Body: d.Body, Key: d.Key}}}
}

// TestNotTransactionalByDefault: a consumer opened without Transactional does not
// claim atomic settlements.
func TestNotTransactionalByDefault(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	q := newTopic(t, "bqtest-txdefault")
	createTopic(t, q, 1)
	if c := consumeOn(t, openKafka(t), q, 1); transport.SettlesAtomically(c) {
		t.Fatal("a consumer opened without Transactional reports SettlesAtomically")
	}
}

// TestTransactionalMoveCommits: each move made by a transactional consumer lands on the
// target once, visible to read_committed readers, and commits the moved record's offset
// for the group in the same transaction: the source is empty after the moves.
func TestTransactionalMoveCommits(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	dlq := newTopic(t, "bqtest-txmove")
	work := dlq + ".work"
	createTopic(t, dlq, 1)
	createTopic(t, work, 1)
	const n = 5
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf(`{"n":%d}`, i))
		produceRaw(t, &kgo.Record{Topic: dlq, Value: []byte(want[i])})
	}
	tr := openKafka(t)
	c := consumeTx(t, tr, dlq, work)
	for range n {
		d := receiveOK(t, c)
		settleOK(t, c, d, moveTo(work, d))
	}
	if got := groupOffset(t, tr.Group(), dlq); got != n {
		t.Errorf("the group's committed offset of %s is %d right after the moves, want %d (committed by the transactions)", dlq, got, n)
	}
	if left := browseBodies(t, tr, dlq); len(left) != 0 {
		t.Errorf("the source still holds %d after the moves: %v", len(left), left)
	}
	got := committedValues(t, work, 3*time.Second)
	if !slices.Equal(got, want) {
		t.Errorf("read_committed on the target: %v, want %v", got, want)
	}
	if got := browseBodies(t, tr, work); !slices.Equal(got, want) {
		t.Errorf("browse of the target: %v, want %v", got, want)
	}
}

// TestTransactionalMoveAbortedBeforeCommit: a move whose transaction is aborted after
// its write and its offset commit were sent (the last step before the commit) leaves
// the record on the source only: the write is on the target's log but never visible to
// read_committed readers (the transport's consumers and browse among them), the
// group's offset does not move, and the record is delivered again and moved once.
func TestTransactionalMoveAbortedBeforeCommit(t *testing.T) {
	t.Parallel()
	tr, c, dlq, work, body := moveRig(t, "bqtest-txabort")

	killed := errors.New("test: killed before the commit")
	var open struct{ raw, committed, browsed int }
	kafka.SetTxBeforeCommit(dlq, func() error {
		// The transaction is open: its write is on the log and its offset commit sent.
		open.raw = countTopic(t, work, 2*time.Second)
		open.committed = len(committedValues(t, work, 2*time.Second))
		open.browsed = len(browseBodies(t, tr, work))
		return killed
	})
	t.Cleanup(func() { kafka.SetTxBeforeCommit(dlq, nil) })
	d := receiveOK(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := c.Settle(ctx, d, moveTo(work, d))
	if !errors.Is(err, killed) {
		t.Fatalf("Settle of an aborted move: %v, want the abort's cause", err)
	}
	var swe *transport.SettleWriteError
	if !errors.As(err, &swe) {
		t.Errorf("Settle of an aborted move: %T, want a *transport.SettleWriteError", err)
	}
	if open.raw != 1 || open.committed != 0 || open.browsed != 0 {
		t.Errorf("while the transaction was open: %d on the target's log, %d read_committed, %d browsed; want 1, 0, 0", open.raw, open.committed, open.browsed)
	}
	if got := committedValues(t, work, 2*time.Second); len(got) != 0 {
		t.Errorf("read_committed on the target after the abort: %v, want nothing", got)
	}
	if got := groupOffset(t, tr.Group(), dlq); got > 0 {
		t.Errorf("the group's committed offset of %s is %d after the abort, want none", dlq, got)
	}
	if got := browseBodies(t, tr, dlq); !slices.Equal(got, []string{body}) {
		t.Errorf("the source after the abort: %v, want the record", got)
	}

	// The worker rewinds; the record comes again and its move commits.
	kafka.SetTxBeforeCommit(dlq, nil)
	moveAgain(t, tr, c, d, dlq, work, body)
	if got := countTopic(t, work, 2*time.Second); got != 2 {
		t.Errorf("the target's log holds %d records, want 2 (the aborted write and the committed one)", got)
	}
}

// TestTransactionalMoveFencedProducer fences the consumer's transactional producer in
// the middle of a move (another producer initializes with its transactional id, as a
// zombie's successor would), so the move's commit and its abort are both refused
// (PRODUCER_FENCED): nothing of the move is visible, and the consumer's next move
// commits, on a producer it built again, instead of failing for ever because franz-go
// keeps a fenced producer in its unended transaction.
func TestTransactionalMoveFencedProducer(t *testing.T) {
	t.Parallel()
	tr, c, dlq, work, body := moveRig(t, "bqtest-txfence")
	id := kafka.TxID(c)
	if id == "" {
		t.Fatal("no transactional id")
	}
	fenced := errors.New("test: fenced before the commit")
	kafka.SetTxBeforeCommit(dlq, func() error {
		zombie := rawClient(t, kgo.TransactionalID(id))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, _, err := zombie.ProducerID(ctx); err != nil {
			t.Errorf("fencing the consumer's producer: %v", err)
		}
		return fenced
	})
	t.Cleanup(func() { kafka.SetTxBeforeCommit(dlq, nil) })
	d := receiveOK(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Settle(ctx, d, moveTo(work, d)); !errors.Is(err, fenced) {
		t.Fatalf("Settle of a fenced move: %v, want the abort's cause", err)
	}
	if got := committedValues(t, work, 2*time.Second); len(got) != 0 {
		t.Errorf("read_committed on the target after the fenced move: %v, want nothing", got)
	}

	kafka.SetTxBeforeCommit(dlq, nil)
	moveAgain(t, tr, c, d, dlq, work, body)
}

// moveRig makes a dead-letter topic (named from prefix) holding one record, body, and
// a work topic beside it, and a transactional consumer of the dead-letter topic that
// may write to the work topic.
func moveRig(t *testing.T, prefix string) (tr *kafka.Transport, c transport.Consumer, dlq, work, body string) {
	t.Helper()
	brokerURL(t)
	dlq = newTopic(t, prefix)
	work = dlq + ".work"
	createTopic(t, dlq, 1)
	createTopic(t, work, 1)
	body = `{"moved":"once"}`
	produceRaw(t, &kgo.Record{Topic: dlq, Value: []byte(body)})
	tr = openKafka(t)
	return tr, consumeTx(t, tr, dlq, work), dlq, work, body
}

// moveAgain rewinds d, the one record of dlq whose move failed, receives it again and
// moves it to work, and checks that work then holds it once for read_committed readers
// and that the group's offset of dlq is past it.
func moveAgain(t *testing.T, tr *kafka.Transport, c transport.Consumer, d *transport.Delivery, dlq, work, body string) {
	t.Helper()
	settleOK(t, c, d, transport.Settlement{Outcome: transport.Rewind})
	d = receiveOK(t, c)
	if string(d.Body) != body {
		t.Fatalf("redelivered %q, want %q", d.Body, body)
	}
	settleOK(t, c, d, moveTo(work, d))
	if got := committedValues(t, work, 3*time.Second); !slices.Equal(got, []string{body}) {
		t.Errorf("read_committed on the target after the second move: %v, want the record once", got)
	}
	if got := groupOffset(t, tr.Group(), dlq); got != 1 {
		t.Errorf("the group's committed offset of %s is %d, want 1", dlq, got)
	}
}

// TestTransactionalMoveKilledBeforeCommit cuts every connection of the transport at
// the last step of a move, after its write and its offset commit were sent and before
// the end of the transaction, as a process killed there would: nothing more reaches
// the broker. The broker aborts the transaction at its timeout; the write is never
// visible to read_committed readers, the group's offset never moves, and another
// consumer of the group gets the record and moves it once.
func TestTransactionalMoveKilledBeforeCommit(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	dlq := newTopic(t, "bqtest-txkill")
	work := dlq + ".work"
	createTopic(t, dlq, 1)
	createTopic(t, work, 1)
	body := `{"moved":"once"}`
	produceRaw(t, &kgo.Record{Topic: dlq, Value: []byte(body)})

	br := &breaker{}
	group := transporttest.UniqueName("bqtest-txkill")
	base := []kgo.Opt{kgo.SeedBrokers(seeds(t)...), kgo.Dialer(br.dial)}
	prod, err := kgo.NewClient(base...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	dead, err := kafka.New(prod, kafka.Factory(base...), kafka.WithGroup(group), kafka.WithDeliveryTimeout(3*time.Second), kafka.WithTxTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dead.Consume(context.Background(), dlq, transport.ConsumeOptions{Prefetch: 1, SettleQueues: []string{work}, Transactional: true})
	if err != nil {
		t.Fatal(err)
	}
	kafka.SetTxBeforeCommit(dlq, func() error {
		br.set(true)
		return nil
	})
	t.Cleanup(func() { kafka.SetTxBeforeCommit(dlq, nil) })
	d := receiveOK(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Settle(ctx, d, moveTo(work, d)); err == nil {
		t.Fatal("Settle succeeded with the broker cut off before the commit")
	} else {
		t.Logf("Settle: %v", err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = dead.Close(cctx)
	ccancel()

	// The broker aborts the open transaction at its timeout: the target's last stable
	// offset then reaches its end.
	adm := kadm.NewClient(rawClient(t))
	deadline := time.Now().Add(90 * time.Second)
	for {
		lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
		stable, err1 := adm.ListCommittedOffsets(lctx, work)
		end, err2 := adm.ListEndOffsets(lctx, work)
		lcancel()
		s, _ := stable.Lookup(work, 0)
		e, _ := end.Lookup(work, 0)
		if err1 == nil && err2 == nil && e.Offset > 0 && s.Offset == e.Offset {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed move's transaction is still open after 90s (stable %d, end %d)", s.Offset, e.Offset)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if got := committedValues(t, work, 2*time.Second); len(got) != 0 {
		t.Errorf("read_committed on the target after the kill: %v, want nothing", got)
	}
	if got := countTopic(t, work, 2*time.Second); got != 1 {
		t.Errorf("the target's log holds %d records, want the killed move's aborted write", got)
	}
	if got := groupOffset(t, group, dlq); got > 0 {
		t.Errorf("the group's committed offset of %s is %d after the kill, want none", dlq, got)
	}

	// Another consumer of the group gets the record and moves it once.
	tr := openKafka(t, "group", group)
	c2 := consumeTx(t, tr, dlq, work)
	if got := browseBodies(t, tr, dlq); !slices.Equal(got, []string{body}) {
		t.Errorf("the source after the kill: %v, want the record", got)
	}
	d = receiveOK(t, c2)
	settleOK(t, c2, d, moveTo(work, d))
	if got := committedValues(t, work, 3*time.Second); !slices.Equal(got, []string{body}) {
		t.Errorf("read_committed on the target after the move: %v, want the record once", got)
	}
	if got := groupOffset(t, group, dlq); got != 1 {
		t.Errorf("the group's committed offset of %s is %d, want 1", dlq, got)
	}
}

// BenchmarkMove moves records from one topic to another one at a time, as a DLQ
// redrive does: in a transaction per move (transactional) and, for comparison, with a
// confirmed write followed by the offset commit (plain: pipeline_settles=0).
func BenchmarkMove(b *testing.B) {
	brokerURL(b)
	for _, mode := range []string{"transactional", "plain"} {
		b.Run(mode, func(b *testing.B) {
			src := newTopic(b, "bqbench-move")
			dst := src + ".work"
			createTopic(b, src, 1)
			createTopic(b, dst, 1)
			recs := make([]*kgo.Record, b.N)
			for i := range recs {
				recs[i] = &kgo.Record{Topic: src, Value: fmt.Appendf(nil, `{"n":%d}`, i)}
			}
			produceRaw(b, recs...)
			tr := openKafka(b, "pipeline_settles", "0")
			c, err := tr.Consume(context.Background(), src, transport.ConsumeOptions{Prefetch: 1, SettleQueues: []string{dst}, Transactional: mode == "transactional"})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = c.Close(ctx)
			}()
			d := receiveOK(b, c) // the group join is not measured
			b.ResetTimer()
			for i := range b.N {
				if i > 0 {
					d = receiveOK(b, c)
				}
				settleOK(b, c, d, moveTo(dst, d))
			}
		})
	}
}
