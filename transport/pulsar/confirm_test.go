package pulsar_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/pulsar"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestPublishConfirmedBatching runs the confirmed-publish kit with the producer's
// batching on (TestKit runs it with batching off, the default): every send of a batch
// in flight, the receipts awaited together.
func TestPublishConfirmedBatching(t *testing.T) {
	cfg := kitConfig(true)
	cfg.EmptyKeyIsNoKey = true
	cfg.Open = func(t *testing.T) transport.Transport { return openTransport(t, "", pulsar.WithBatching(true)) }
	transporttest.RunPublishConfirmed(t, cfg)
}

// TestPublishConfirmedRefusedInTheMiddle: an empty body and one over the size limit are
// reported at their indexes; the rest of the batch is persisted, in order.
func TestPublishConfirmedRefusedInTheMiddle(t *testing.T) {
	tr := openTransport(t, "", pulsar.WithMaxMessageSize(pulsar.MetadataReserve+4096))
	q := "persistent://public/default/" + transporttest.UniqueName("bqconfirm")
	var msgs []*transport.Message
	for i := range 8 {
		body := `{"job":"urn:babel:test:confirm","data":{"n":` + string(rune('0'+i)) + `}}`
		switch i {
		case 2:
			body = ""
		case 5:
			body = `{"job":"urn:babel:test:confirm","data":{"pad":"` + strings.Repeat("x", 8192) + `"}}`
		}
		msgs = append(msgs, &transport.Message{Queue: q, Body: []byte(body)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	err = tr.PublishConfirmed(ctx, msgs)
	var be *transport.BatchError
	if !errors.As(err, &be) || !slices.Equal(be.Failed(), []int{2, 5}) ||
		!errors.Is(be.Errs[2], pulsar.ErrEmptyBody) || !errors.Is(be.Errs[5], transport.ErrTooLarge) {
		t.Fatalf("PublishConfirmed: %v, want a BatchError failing 2 (empty) and 5 (too large)", err)
	}
	for _, i := range []int{0, 1, 3, 4, 6, 7} {
		d := transporttest.Receive(t, c, 20*time.Second)
		if string(d.Body) != string(msgs[i].Body) {
			t.Fatalf("got %s, want message %d %s", d.Body, i, msgs[i].Body)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	transporttest.ExpectNothing(t, c, time.Second)
}
