package kafka_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestPublishWaitsForRoomUntilItsContextEnds: a fire-and-forget Publish that finds the
// producer's buffer full (here a producer that sends only when flushed, with room for
// two records) waits until its context ends and returns that error, with its record not
// buffered; it is neither refused silently later nor stuck for ever. Once the buffer is
// flushed there is room again, and every record that Publish accepted is on the topic.
func TestPublishWaitsForRoomUntilItsContextEnds(t *testing.T) {
	t.Parallel()
	q := newTopic(t, "bqtest-full")
	createTopic(t, q, 1)
	prod := rawClient(t, kgo.MaxBufferedRecords(2), kgo.ManualFlushing())
	tr, err := kafka.New(prod, nil, kafka.WithGroup(transporttest.UniqueName("bqtest-full")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	publishOK(t, tr, &transport.Message{Queue: q, Body: []byte("1")})
	publishOK(t, tr, &transport.Message{Queue: q, Body: []byte("2")})

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte("3")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish into a full buffer: %v, want its context's deadline", err)
	}

	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	if err := tr.Flush(fctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	publishOK(t, tr, &transport.Message{Queue: q, Body: []byte("4")})
	if err := tr.Flush(fctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if got := countTopic(t, q, 2*time.Second); got != 3 {
		t.Errorf("the topic holds %d records, want 3 (the two before the full buffer and the one after)", got)
	}
}

// TestPublishConfirmedBatchLargerThanTheBuffer: a confirmed batch of more records than
// the producer's buffer holds is written whole, each record waiting for room in turn,
// and in order.
func TestPublishConfirmedBatchLargerThanTheBuffer(t *testing.T) {
	t.Parallel()
	const n = 50
	q := newTopic(t, "bqtest-bigbatch")
	createTopic(t, q, 1)
	prod := rawClient(t, kgo.MaxBufferedRecords(4))
	tr, err := kafka.New(prod, nil, kafka.WithGroup(transporttest.UniqueName("bqtest-bigbatch")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	msgs := make([]*transport.Message, n)
	for i := range msgs {
		msgs[i] = &transport.Message{Queue: q, Body: []byte(strconv.Itoa(i))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := tr.PublishConfirmed(ctx, msgs); err != nil {
		t.Fatalf("PublishConfirmed of %d records through a buffer of 4: %v", n, err)
	}
	got := committedValues(t, q, 2*time.Second)
	if len(got) != n {
		t.Fatalf("the topic holds %d records, want %d", len(got), n)
	}
	for i, v := range got {
		if v != strconv.Itoa(i) {
			t.Fatalf("record %d is %q, want %q (in order)", i, v, strconv.Itoa(i))
		}
	}
}
