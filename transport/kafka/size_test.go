package kafka_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// noise returns n random bytes: no compression codec shrinks them.
func noise(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// envelopeOf returns a JSON body of n bytes.
func envelopeOf(n int) []byte {
	b := append([]byte(`{"pad":"`), bytes.Repeat([]byte("x"), n-10)...)
	return append(b, `"}`...)
}

// TestPublishTooLarge: a message whose record cannot fit the producer's batch limit (an
// envelope of about 1 MB; the limit is the lower of franz-go's ProducerBatchMaxBytes and
// the broker's message.max.bytes) is refused by Publish before it is buffered, with the
// limit in the error, and so is such a settle write; a message just under the limit is
// delivered byte for byte.
func TestPublishTooLarge(t *testing.T) {
	t.Parallel()
	tr := openKafka(t)
	q := newTopic(t, "bqtest-large")
	createTopic(t, q, 1)
	limit := tr.MaxRecordBytes()
	if limit <= 0 || limit > 1048588 {
		t.Fatalf("MaxRecordBytes = %d, want the producer's 1000012 or the broker's lower limit", limit)
	}
	err := tr.Publish(context.Background(), &transport.Message{Queue: q, Body: envelopeOf(1 << 20)})
	var tle *transport.TooLargeError
	if !errors.Is(err, transport.ErrTooLarge) || !errors.As(err, &tle) {
		t.Fatalf("Publish of a 1 MiB envelope = %v, want a TooLargeError", err)
	}
	if tle.Limit != limit || tle.Size <= limit || tle.Queue != q || tle.Broker != "kafka" {
		t.Errorf("TooLargeError = %+v, want limit %d, a larger size and queue %s", tle, limit, q)
	}
	fits := envelopeOf(limit - 300) // room for the record framing and the attempts header
	publishOK(t, tr, &transport.Message{Queue: q, Body: fits})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tr.Flush(ctx); err != nil {
		t.Fatalf("Flush after a refused and an accepted publish = %v, want nil (the refused one was never buffered)", err)
	}
	recs := readTopic(t, q, 1)
	if !bytes.Equal(recs[0].Value, fits) {
		t.Fatalf("the record under the limit arrived with %d bytes, want %d", len(recs[0].Value), len(fits))
	}

	c := consumeOn(t, tr, q, 1)
	d := transporttest.Receive(t, c, 30*time.Second)
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: q + ".dlq", Body: envelopeOf(1 << 20)}}})
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("settle write of a 1 MiB envelope = %v, want an error matching ErrSettleWrite and ErrTooLarge", err)
	}
	settleOK(t, c, d, transport.Settlement{Outcome: transport.Rewind})
}

// TestBrokerLimitBinds: with a producer whose own batch limit is above the broker's
// message.max.bytes, the transport reads the broker's limit and refuses what the broker
// would refuse, naming the broker's limit.
func TestBrokerLimitBinds(t *testing.T) {
	t.Parallel()
	brokerLimit := brokerMessageMaxBytes(t)
	prod := rawClient(t, kgo.ProducerBatchMaxBytes(int32(4*brokerLimit)))
	tr, err := kafka.New(prod, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	deadline := time.Now().Add(20 * time.Second)
	for tr.MaxRecordBytes() != brokerLimit && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := tr.MaxRecordBytes(); got != brokerLimit {
		t.Fatalf("MaxRecordBytes = %d, want the broker's message.max.bytes %d", got, brokerLimit)
	}
	q := newTopic(t, "bqtest-brokerlimit")
	err = tr.Publish(context.Background(), &transport.Message{Queue: q, Body: envelopeOf(brokerLimit)})
	var tle *transport.TooLargeError
	if !errors.As(err, &tle) || tle.Limit != brokerLimit {
		t.Fatalf("Publish over the broker's limit = %v, want a TooLargeError with limit %d", err, brokerLimit)
	}
}

// brokerMessageMaxBytes reads message.max.bytes of the test broker.
func brokerMessageMaxBytes(t *testing.T) int {
	t.Helper()
	adm := kadm.NewClient(rawClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx, brokers.NodeIDs()[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key == "message.max.bytes" && c.Value != nil {
				n, err := strconv.Atoi(*c.Value)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
	}
	t.Fatal("the broker reports no message.max.bytes")
	return 0
}

// TestFlushReportsRefusedPublishes: a fire-and-forget publish the broker refuses (here a
// record over the topic's own max.message.bytes, which the transport does not read,
// with a body no compression shrinks) is
// not lost silently: Flush returns it, and so does Close for one made after that Flush.
func TestFlushReportsRefusedPublishes(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	q := smallTopic(t, "bqtest-refused")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := kafka.Open(ctx, withParams(t, brokerURL(t), "group", transporttest.UniqueName("bqtest-refused")))
	if err != nil {
		t.Fatal(err)
	}
	publishOK(t, tr, &transport.Message{Queue: q, Body: noise(50000)})
	err = tr.Flush(ctx)
	var ue *kafka.UndeliveredError
	if !errors.As(err, &ue) || !errors.Is(err, kafka.ErrDelivery) || !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("Flush after a publish the broker refused = %v, want an UndeliveredError matching MESSAGE_TOO_LARGE", err)
	}
	if ue.Count != 1 || len(ue.Errs) != 1 || ue.Errs[0].Topic != q {
		t.Errorf("UndeliveredError = %+v, want one failed publish to %s", ue, q)
	}
	publishOK(t, tr, &transport.Message{Queue: q, Body: []byte(`{"ok":1}`)})
	if err := tr.Flush(ctx); err != nil {
		t.Errorf("second Flush = %v, want nil (the failure was reported once)", err)
	}
	publishOK(t, tr, &transport.Message{Queue: q, Body: noise(50000)})
	if err := tr.Close(ctx); !errors.As(err, &ue) || ue.Count != 1 {
		t.Fatalf("Close after a refused publish = %v, want an UndeliveredError for it", err)
	}
	if vs := topicValues(t, q, 3*time.Second); len(vs) != 1 || vs[0] != `{"ok":1}` {
		t.Errorf("topic holds %d records, want only the small one", len(vs))
	}
}

// TestConfirmedPublish: with ?confirm=1, Publish waits for the broker: a record the broker
// refuses is an error from Publish itself, one it accepts is on the topic when Publish
// returns.
func TestConfirmedPublish(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	q := smallTopic(t, "bqtest-confirm")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := openKafka(t, "confirm", "1")
	if !tr.Capabilities().PublishConfirmed {
		t.Fatal("confirm=1: Capabilities().PublishConfirmed is false")
	}
	err := tr.Publish(ctx, &transport.Message{Queue: q, Body: noise(50000)})
	var de *kafka.DeliveryError
	if !errors.As(err, &de) || !errors.Is(err, kerr.MessageTooLarge) || de.Topic != q {
		t.Fatalf("confirmed Publish the broker refuses = %v, want a DeliveryError with MESSAGE_TOO_LARGE", err)
	}
	publishOK(t, tr, &transport.Message{Queue: q, Body: []byte(`{"ok":1}`)})
	if vs := topicValues(t, q, 2*time.Second); len(vs) != 1 || vs[0] != `{"ok":1}` {
		t.Errorf("topic holds %q, want the confirmed record", vs)
	}
	if err := tr.Flush(ctx); err != nil {
		t.Errorf("Flush = %v, want nil: a confirmed publish's failure is Publish's own error", err)
	}
}

// smallTopic creates a new topic (see newTopic) with one partition and a
// max.message.bytes of 20 000: the broker refuses a batch over it, which the transport
// does not check itself.
func smallTopic(t *testing.T, prefix string) string {
	t.Helper()
	topic := newTopic(t, prefix)
	adm := kadm.NewClient(rawClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	small := "20000"
	resp, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &small}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	return topic
}
