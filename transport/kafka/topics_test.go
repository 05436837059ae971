package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// deadLettered reads the dead-letter topic from the start for quiet and returns the
// values of data.n it holds.
func deadLettered(t *testing.T, dlq string, quiet time.Duration) []int {
	t.Helper()
	var ns []int
	for _, v := range topicValues(t, dlq, quiet) {
		var env struct {
			Data struct {
				N int `json:"n"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(v), &env); err != nil {
			t.Fatalf("dead letter is not an envelope: %v: %q", err, v)
		}
		ns = append(ns, env.Data.N)
	}
	return ns
}

// TestDeletedDeadLetterTopicRecovers: the dead-letter topic is deleted while the app
// runs. franz-go keeps the deleted topic's id and fails every later write to the name
// with UNKNOWN_TOPIC_ID, although the broker auto-creates the topic again; each failure
// rewinds the partition. The transport forgets the stale topic and holds the partition
// back after a failure, so the next messages are dead-lettered to the new topic and the
// handler does not spin (before: 82,504 handler runs for 232 messages in 150 s).
func TestDeletedDeadLetterTopicRecovers(t *testing.T) {
	t.Parallel()
	tr := openKafka(t, "delivery_timeout", "5s")
	q := newTopic(t, "bqtest-dlqdel")
	dlq := q + ".dlq"
	createTopic(t, q, 1)
	const urn = "urn:babel:t:dlqdel"
	a, err := babelqueue.New(tr, babelqueue.WithQueue(q), babelqueue.WithDeadLetter(true), babelqueue.WithConcurrency(4),
		babelqueue.WithLogger(brokerproc.TestLogger(t, slog.LevelError+1)))
	if err != nil {
		t.Fatal(err)
	}
	type payload struct {
		N int `json:"n"`
	}
	var runs atomic.Int64
	babelqueue.Handle(a, urn, func(_ context.Context, _ payload, _ *babelqueue.Message) error {
		runs.Add(1)
		return babelqueue.NoRetry(errors.New("refused"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(ctx) }()
	defer func() {
		cancel()
		<-runDone
	}()
	const n = 20
	publish := func(from int) {
		for i := from; i < from+n; i++ {
			if _, err := a.Publish(ctx, urn, payload{N: i}); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(0)
	readTopic(t, dlq, n)

	adm := kadm.NewClient(rawClient(t))
	resp, err := adm.DeleteTopics(ctx, dlq)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete %s: %v", dlq, err)
	}
	time.Sleep(time.Second)
	publish(n)

	want := make([]int, n)
	for i := range want {
		want[i] = n + i
	}
	var got []int
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		got = deadLettered(t, dlq, 2*time.Second)
		if !slices.ContainsFunc(want, func(i int) bool { return !slices.Contains(got, i) }) {
			break
		}
	}
	for _, i := range want {
		if !slices.Contains(got, i) {
			t.Fatalf("message %d is not in the re-created %s (it holds %v)", i, dlq, got)
		}
	}
	// Each message is handled once, plus the redeliveries of a few failed dead-letter
	// writes (each rewinds the partition: up to the four deliveries handed out).
	if r := runs.Load(); r > 4*n {
		t.Errorf("the handler ran %d times for %d messages: the failing writes spun", r, 2*n)
	} else {
		t.Logf("the handler ran %d times for %d messages", r, 2*n)
	}
}

// TestSettleTopicsAtStart: the dead-letter and delay topics a consumer's settle writes
// need are created at Consume, even through a client of the user's that does not ask
// the broker to auto-create topics; with auto-creation off, a missing one is a clear
// error from Consume (and from the app's Run) naming it, instead of a failed write per
// message later.
func TestSettleTopicsAtStart(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	q := newTopic(t, "bqtest-prep")
	dlq, tier := q+".dlq", q+".delay.1500"
	createTopic(t, q, 1)
	opts := transport.ConsumeOptions{Prefetch: 1, SettleQueues: []string{dlq}, SettleDelays: []time.Duration{1500 * time.Millisecond}}
	userTransport := func(o ...kafka.Option) *kafka.Transport {
		base := []kgo.Opt{kgo.SeedBrokers(seeds(t)...)}
		prod := rawClient(t) // no AllowAutoTopicCreation
		tr, err := kafka.New(prod, kafka.Factory(base...), append(o, kafka.WithGroup(transporttest.UniqueName("bqtest-prep")))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		return tr
	}

	off := userTransport(kafka.WithAutoCreateTopics(false))
	_, err := off.Consume(context.Background(), q, opts)
	var mte *kafka.MissingTopicError
	if !errors.Is(err, kafka.ErrMissingTopic) || !errors.As(err, &mte) {
		t.Fatalf("Consume with missing settle topics and auto-creation off = %v, want a MissingTopicError", err)
	}
	if !slices.Equal(mte.Topics, []string{dlq, tier}) || mte.Queue != q {
		t.Errorf("MissingTopicError = %+v, want topics %s and %s of queue %s", mte, dlq, tier, q)
	}
	a, err := babelqueue.New(off, babelqueue.WithQueue(q), babelqueue.WithDeadLetter(true),
		babelqueue.WithLogger(brokerproc.TestLogger(t, slog.LevelError+1)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Run(ctx); !errors.Is(err, kafka.ErrMissingTopic) {
		t.Fatalf("Run with a missing dead-letter topic = %v, want an error matching ErrMissingTopic", err)
	} else {
		t.Logf("Run: %v", err)
	}
	if topicExists(t, dlq) || topicExists(t, tier) {
		t.Fatal("a transport with auto-creation off created a topic")
	}

	on := userTransport()
	c, err := on.Consume(context.Background(), q, opts)
	if err != nil {
		t.Fatalf("Consume with auto-creation on: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	for _, topic := range []string{dlq, tier} {
		// The broker's metadata answers may lag a creation by a moment on a loaded machine.
		deadline := time.Now().Add(15 * time.Second)
		for !topicExists(t, topic) {
			if time.Now().After(deadline) {
				t.Errorf("Consume did not create %s", topic)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	publishOK(t, on, &transport.Message{Queue: q, Body: []byte(`{"n":1}`)})
	d := transporttest.Receive(t, c, 30*time.Second)
	settleOK(t, c, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: dlq, Body: d.Body}}})
	if vs := topicValues(t, dlq, 2*time.Second); len(vs) != 1 {
		t.Errorf("%s holds %d records, want the dead letter", dlq, len(vs))
	}
}
