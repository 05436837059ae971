package transporttest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
)

// SizeLimit is the limit, in bytes, [RunSizeLimit] opens transports with.
const SizeLimit = 64

// RunSizeLimit checks the size check of a driver on a transport open returns with a
// limit of [SizeLimit] bytes: a publish over it fails before it is sent with a
// *[transport.TooLargeError] naming the broker and the limit; a confirmed batch (where
// the transport is a [transport.ConfirmedPublisher]) reports the oversized message and
// writes the others; a settle write over it fails with [transport.ErrSettleWrite] and
// [transport.ErrTooLarge], acknowledges nothing and writes nothing, and the delivery can
// still be rewound and settled.
func RunSizeLimit(t *testing.T, cfg Config, broker string, open func(t *testing.T, limit int) transport.Transport) {
	cfg.defaults()
	tr := open(t, SizeLimit)
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ReceiveTimeout)
	defer cancel()
	q, side := cfg.NewQueue(t), cfg.NewQueue(t)
	big := []byte(`{"job":"urn:babel:x:y","data":"` + strings.Repeat("x", SizeLimit) + `"}`)
	err := tr.Publish(ctx, &transport.Message{Queue: q, Body: big})
	var tl *transport.TooLargeError
	if !errors.As(err, &tl) || tl.Limit != SizeLimit || tl.Size < len(big) || tl.Broker != broker {
		t.Fatalf("Publish of %d bytes with a limit of %d = %v, want a TooLargeError from %s", len(big), SizeLimit, err, broker)
	}
	small := [][]byte{[]byte(`{"n":1}`), []byte(`{"n":3}`)}
	if cp, ok := tr.(transport.ConfirmedPublisher); ok {
		err = cp.PublishConfirmed(ctx, []*transport.Message{{Queue: q, Body: small[0]}, {Queue: q, Body: big}, {Queue: q, Body: small[1]}})
		var be *transport.BatchError
		if !errors.As(err, &be) || !errors.Is(err, transport.ErrTooLarge) {
			t.Fatalf("PublishConfirmed with an oversized message = %v, want a BatchError matching ErrTooLarge", err)
		}
	} else {
		for _, b := range small {
			publish(t, tr, &transport.Message{Queue: q, Body: b})
		}
	}
	c := consume(t, Config{Prefetch: 1, ReceiveTimeout: cfg.ReceiveTimeout}, tr, q)
	d := Receive(t, c, cfg.ReceiveTimeout)
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: side, Body: big}}})
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("an oversized settle write = %v, want ErrSettleWrite and ErrTooLarge", err)
	}
	settle(t, c, d, transport.Settlement{Outcome: transport.Rewind})
	var got [][]byte
	for range small {
		d := Receive(t, c, cfg.ReceiveTimeout)
		got = append(got, d.Body)
		settle(t, c, d, transport.Settlement{Outcome: transport.Ack})
	}
	sortBytes(got)
	if !bytes.Equal(got[0], small[0]) || !bytes.Equal(got[1], small[1]) {
		t.Fatalf("after the refused writes the queue held %q, want %q", got, small)
	}
	ExpectNothing(t, c, cfg.QuietPeriod)
	ExpectNothing(t, consume(t, cfg, tr, side), cfg.QuietPeriod)
}
