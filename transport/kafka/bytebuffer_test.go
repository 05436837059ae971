package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
)

// TestByteBoundedBufferFullPublishEndsWithContext: with a producer of your own that
// bounds its buffer in bytes (kgo.MaxBufferedBytes), a Publish or a PublishConfirmed that
// finds the buffer full waits only until its context ends, and says why; it never hangs
// on a broker that does not answer.
func TestByteBoundedBufferFullPublishEndsWithContext(t *testing.T) {
	t.Parallel()
	prod, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.MaxBufferedBytes(2048))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	tr, err := kafka.New(prod, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	}()
	body := bytes.Repeat([]byte("x"), 900)
	for name, publish := range map[string]func(ctx context.Context) error{
		"Publish": func(ctx context.Context) error {
			return tr.Publish(ctx, &transport.Message{Queue: "bqtest-bytes", Body: body})
		},
		"PublishConfirmed": func(ctx context.Context) error {
			return tr.PublishConfirmed(ctx, []*transport.Message{{Queue: "bqtest-bytes", Body: body}})
		},
	} {
		done := make(chan error, 1)
		go func() {
			var err error
			for range 8 { // two fill the buffer; the next waits for room
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				err = publish(ctx)
				cancel()
				if err != nil {
					break
				}
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s into a full buffer = %v, want an error matching context.DeadlineExceeded", name, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s into a full buffer did not return when its context ended", name)
		}
	}
}

// TestByteBoundedRecordOutlivesPublishContext: on a producer bounding its buffer in
// bytes, a record handed over is delivered though the context of its Publish or
// PublishConfirmed ends at once after the call (franz-go would otherwise fail it, and
// every record buffered behind it).
func TestByteBoundedRecordOutlivesPublishContext(t *testing.T) {
	t.Parallel()
	prod := rawClient(t, kgo.MaxBufferedBytes(1<<20), kgo.AllowAutoTopicCreation())
	tr, err := kafka.New(prod, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := newTopic(t, "bqtest-bytes")
	createTopic(t, q, 1)
	for i := range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		m := &transport.Message{Queue: q, Body: fmt.Appendf(nil, `{"n":%d}`, i)}
		if i%2 == 0 {
			err = tr.Publish(ctx, m)
		} else {
			go func() { time.Sleep(time.Millisecond); cancel() }() // ends while the write is awaited
			_ = tr.PublishConfirmed(ctx, []*transport.Message{m})
			err = nil
		}
		cancel()
		if err != nil {
			t.Fatalf("Publish %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v (a record failed with its publish's context)", err)
	}
	if got := readTopic(t, q, 20); len(got) != 20 {
		t.Fatalf("read %d records, want 20", len(got))
	}
}
