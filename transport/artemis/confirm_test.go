package artemis_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/artemis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestPublishConfirmedTooLargeInTheMiddle: a message over the size limit is reported at
// its index and the rest of the batch is still written and confirmed.
func TestPublishConfirmedTooLargeInTheMiddle(t *testing.T) {
	tr := openTransport(t, artemis.WithMaxMessageSize(4096))
	q := transporttest.UniqueName("bqconfirm")
	var msgs []*transport.Message
	for i := range 6 {
		body := `{"job":"urn:babel:test:confirm","trace_id":"t","data":{"n":` + string(rune('0'+i)) + `},"meta":{"id":"m"}}`
		if i == 3 {
			body = `{"job":"urn:babel:test:confirm","data":{"pad":"` + strings.Repeat("x", 8192) + `"}}`
		}
		msgs = append(msgs, &transport.Message{Queue: q, Body: []byte(body)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := tr.PublishConfirmed(ctx, msgs)
	var be *transport.BatchError
	if !errors.As(err, &be) || !slices.Equal(be.Failed(), []int{3}) || !errors.Is(be.Errs[3], transport.ErrTooLarge) {
		t.Fatalf("PublishConfirmed with message 3 too large: %v, want a BatchError failing index 3 alone with ErrTooLarge", err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, i := range []int{0, 1, 2, 4, 5} {
		d := transporttest.Receive(t, c, 10*time.Second)
		if string(d.Body) != string(msgs[i].Body) {
			t.Fatalf("got %s, want message %d %s", d.Body, i, msgs[i].Body)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	transporttest.ExpectNothing(t, c, 500*time.Millisecond)
}
