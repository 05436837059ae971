package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// RunPublishConfirmed checks [transport.PublishConfirmed] on the transport cfg opens: a
// batch arrives whole, in order, bytes, keys and headers exact; a batch with a bad
// message in the middle reports exactly that index in a *[transport.BatchError] and
// delivers the others; an empty batch is nothing; a closed transport confirms nothing.
func RunPublishConfirmed(t *testing.T, cfg Config) {
	cfg.defaults()
	t.Run("BatchArrivesInOrder", func(t *testing.T) { testConfirmedBatch(t, cfg) })
	t.Run("BadMessageReportedByIndex", func(t *testing.T) { testConfirmedBadIndex(t, cfg) })
	t.Run("EmptyAndClosed", func(t *testing.T) { testConfirmedEmptyAndClosed(t, cfg) })
}

func confirmedBatch(q string, n int, keys bool) []*transport.Message {
	ms := make([]*transport.Message, n)
	for i := range ms {
		m := msg(q, fmt.Sprintf("confirmed-%03d", i))
		if i%3 == 1 {
			m.Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-n": fmt.Sprint(i)}
		}
		if keys {
			switch i % 3 {
			case 0:
				m.Key = []byte(fmt.Sprintf("key-%d", i%2))
			case 1:
				m.Key = []byte{}
			}
		}
		ms[i] = m
	}
	return ms
}

func publishConfirmed(t *testing.T, tr transport.Transport, ms []*transport.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return transport.PublishConfirmed(ctx, tr, ms)
}

// receiveAll receives n deliveries in order and acks each.
func receiveAll(t *testing.T, cfg Config, c transport.Consumer, n int) []*transport.Delivery {
	t.Helper()
	ds := make([]*transport.Delivery, 0, n)
	for range n {
		d := Receive(t, c, cfg.ReceiveTimeout)
		settle(t, c, d, transport.Settlement{Outcome: transport.Ack})
		ds = append(ds, d)
	}
	return ds
}

func testConfirmedBatch(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	ms := confirmedBatch(q, 60, !cfg.NoKeys)
	if err := publishConfirmed(t, tr, ms); err != nil {
		t.Fatalf("PublishConfirmed: %v", err)
	}
	c := consume(t, cfg, tr, q)
	ds := receiveAll(t, cfg, c, len(ms))
	ExpectNothing(t, c, cfg.QuietPeriod)
	if cfg.UnorderedBatches {
		ms = inArrivalOrder(t, ms, ds)
	}
	for i, d := range ds {
		m := ms[i]
		if !bytes.Equal(d.Body, m.Body) {
			t.Fatalf("delivery %d: body\n got %q\nwant %q (out of order or changed)", i, d.Body, m.Body)
		}
		for k, v := range m.Headers {
			if d.Headers[k] != v {
				t.Errorf("delivery %d: header %q = %q, want %q", i, k, d.Headers[k], v)
			}
		}
		if !cfg.NoKeys && (!bytes.Equal(d.Key, m.Key) || ((d.Key == nil) != (m.Key == nil) && !cfg.EmptyKeyIsNoKey)) {
			t.Errorf("delivery %d: key %q (nil %v), want %q (nil %v)", i, d.Key, d.Key == nil, m.Key, m.Key == nil)
		}
	}
}

func testConfirmedBadIndex(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	q := cfg.NewQueue(t)
	ms := confirmedBatch(q, 5, !cfg.NoKeys)
	ms[2] = &transport.Message{Body: body("no-queue")} // no queue: refused
	err := publishConfirmed(t, tr, ms)
	var be *transport.BatchError
	if !errors.As(err, &be) || !errors.Is(err, transport.ErrNotConfirmed) {
		t.Fatalf("PublishConfirmed with a message without a queue: got %v, want a *transport.BatchError", err)
	}
	if got := be.Failed(); !slices.Equal(got, []int{2}) && !slices.Equal(got, []int{2, 3, 4}) {
		t.Fatalf("failed indexes %v, want [2] (or [2 3 4] for a transport that stops at a failure)", got)
	}
	c := consume(t, cfg, tr, q)
	var want []*transport.Message
	for i, m := range ms {
		if be.Errs[i] == nil {
			want = append(want, m)
		}
	}
	ds := receiveAll(t, cfg, c, len(want))
	ExpectNothing(t, c, cfg.QuietPeriod)
	if cfg.UnorderedBatches {
		want = inArrivalOrder(t, want, ds)
	}
	for i, d := range ds {
		if !bytes.Equal(d.Body, want[i].Body) {
			t.Errorf("delivery %d: body %q, want %q", i, d.Body, want[i].Body)
		}
	}
}

func testConfirmedEmptyAndClosed(t *testing.T, cfg Config) {
	tr := open(t, cfg)
	if err := publishConfirmed(t, tr, nil); err != nil {
		t.Fatalf("PublishConfirmed of no messages: %v", err)
	}
	q := cfg.NewQueue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := publishConfirmed(t, tr, confirmedBatch(q, 3, false)); err == nil {
		t.Fatal("PublishConfirmed on a closed transport returned nil")
	}
	reader := open(t, cfg)
	c := consume(t, cfg, reader, q)
	ExpectNothing(t, c, cfg.QuietPeriod)
}

// inArrivalOrder returns sent reordered as ds arrived, each delivery matched by its
// body to one message sent; a delivery that matches none fails the test.
func inArrivalOrder(t *testing.T, sent []*transport.Message, ds []*transport.Delivery) []*transport.Message {
	t.Helper()
	left := slices.Clone(sent)
	out := make([]*transport.Message, 0, len(ds))
	for i, d := range ds {
		k := slices.IndexFunc(left, func(m *transport.Message) bool { return bytes.Equal(m.Body, d.Body) })
		if k < 0 {
			t.Fatalf("delivery %d: body %q was not sent (or arrived twice)", i, d.Body)
		}
		out = append(out, left[k])
		left = slices.Delete(left, k, k+1)
	}
	return out
}
