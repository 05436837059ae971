package amqp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// TestNackedSettleWriteAcksNothing: a settle write the broker refuses (a queue that
// rejects publishes when full) returns a SettleWriteError naming that queue, the
// original stays unacknowledged, and a Rewind gives it back. Settle writes are not
// pipelined here (pipeline_settles=0); TestPipelinedNackedWriteRewinds is the default.
func TestNackedSettleWriteAcksNothing(t *testing.T) {
	ctx := ctxT(t)
	q, full := newQueue(t), newQueue(t)
	ch := rawChannel(t, rawConn(t))
	if _, err := ch.QueueDeclare(full, true, false, false, false, amqp091.Table{
		"x-max-length": int32(0), "x-overflow": "reject-publish",
	}); err != nil {
		t.Fatal(err)
	}
	tr := openT(t, WithPipelinedSettles(false))
	// The transport would try to redeclare "full" without arguments and be refused;
	// with WithoutDeclare the publish reaches the queue and is nacked.
	trNoDeclare := openT(t, WithoutDeclare(), WithPipelinedSettles(false))
	body := []byte(`{"job":"urn:babel:t:nack","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tr   *Transport
	}{{"nack", trNoDeclare}, {"declare-refused", tr}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			d := receive(t, c, 30*time.Second)
			err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: full, Body: d.Body, Attempts: 1}}})
			if !errors.Is(err, transport.ErrSettleWrite) {
				t.Fatalf("Settle with a refused write = %v, want ErrSettleWrite", err)
			}
			var swe *transport.SettleWriteError
			if !errors.As(err, &swe) || swe.Queue != full {
				t.Errorf("error %v: want a SettleWriteError naming %q", err, full)
			}
			// Not acknowledged: the runtime rewinds, and the broker hands it out again.
			if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
				t.Fatalf("Rewind after a failed write: %v", err)
			}
			d2 := receive(t, c, 30*time.Second)
			if !bytes.Equal(d2.Body, body) {
				t.Fatalf("redelivered body = %q", d2.Body)
			}
			if d2.Redeliveries != 1 {
				t.Errorf("Redeliveries = %d, want 1 (redelivered flag)", d2.Redeliveries)
			}
			if err := c.Settle(ctx, d2, transport.Settlement{Outcome: transport.Rewind}); err != nil {
				t.Fatal(err)
			}
		})
	}
	info, err := ch.QueueDeclarePassive(full, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Messages != 0 {
		t.Errorf("the rejecting queue holds %d messages", info.Messages)
	}
}

// TestSettleAfterConnectionLoss: when the connection dies under a delivery, settling
// it makes no write and returns an error matching ErrDeliveryLost and
// ErrAlreadySettled; the consumer resumes by itself and the broker redelivers the
// message, exactly once more.
func TestSettleAfterConnectionLoss(t *testing.T) {
	ctx := ctxT(t)
	k := &killer{}
	tr := openT(t, WithDialer(k.dial))
	q, side := newQueue(t), newQueue(t)
	body := []byte(`{"job":"urn:babel:t:lost","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":0}`)
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: body}); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	d := receive(t, c, 30*time.Second)
	d2 := d // the same delivery, settled a second way below
	k.killAll()

	// Wait until the channel is seen dead (the client notices the socket at once).
	h := d.Handle.(*driverkit.Entry[msg]).Value
	for i := 0; !h.s.ch.IsClosed(); i++ {
		if i > 200 {
			t.Fatal("channel still open after the socket died")
		}
		time.Sleep(10 * time.Millisecond)
	}
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: side, Body: []byte(`{"side":1}`)}}})
	if !errors.Is(err, ErrDeliveryLost) || !errors.Is(err, transport.ErrAlreadySettled) {
		t.Fatalf("Settle of a lost delivery = %v, want ErrDeliveryLost and ErrAlreadySettled", err)
	}
	if err := c.Settle(ctx, d2, transport.Settlement{Outcome: transport.Rewind}); !errors.Is(err, transport.ErrAlreadySettled) {
		t.Errorf("second Settle = %v, want ErrAlreadySettled", err)
	}
	// The consumer comes back on a new connection and gets the message again.
	again := receive(t, c, 30*time.Second)
	if !bytes.Equal(again.Body, body) {
		t.Fatalf("redelivered body = %q", again.Body)
	}
	if again.Redeliveries != 1 {
		t.Errorf("Redeliveries = %d, want 1", again.Redeliveries)
	}
	if err := c.Settle(ctx, again, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatalf("Settle on the resumed consumer: %v", err)
	}
	// No settle write was made for the lost delivery.
	ch := rawChannel(t, rawConn(t))
	if info, err := ch.QueueDeclare(side, true, false, false, false, nil); err != nil || info.Messages != 0 {
		t.Errorf("side queue: %d messages (err %v); a lost delivery made its settle write", info.Messages, err)
	}
	ctxQ, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if extra, err := c.Receive(ctxQ); err == nil {
		t.Errorf("message delivered again after its ack: %q", extra.Body)
	}
}

// TestConnectionLossMidRun cuts the connection several times while a producer and a
// consumer with several workers run, and checks that every message is accounted for.
func TestConnectionLossMidRun(t *testing.T) {
	k := &killer{}
	tr := openT(t, WithDialer(k.dial), WithConfirmTimeout(5*time.Second))
	accountedRun(t, tr, brokerURL(t), newQueue(t), 300, func(i int) {
		if i%60 == 30 {
			k.killAll()
		}
	})
}

// accountedRun publishes n messages to q while four workers consume and acknowledge
// them, calling disrupt after each publish, and checks that every message is
// acknowledged, none is lost, the queue ends empty, and the only repeats are deliveries
// whose settle reported the loss, redeliveries of a message whose ack the broker lost
// with its connection, or publishes retried after an error.
func accountedRun(t *testing.T, tr *Transport, rawURL, q string, n int, disrupt func(i int)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	c, err := tr.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)

	var (
		mu      sync.Mutex
		acked   = map[string]int{}
		lost    = map[string]int{}
		retried int
		// Messages handed out again after an ack of them that returned nil: the broker
		// lost that ack with its connection (AMQP 0-9-1 does not confirm acks; the
		// redelivered flag tells such a repeat from a message published twice).
		ackLost   int
		published = make(chan struct{})
	)
	go func() {
		defer close(published)
		for i := range n {
			m := &transport.Message{Queue: q, Body: fmt.Appendf(nil, `{"job":"urn:babel:t:mid","n":%d}`, i)}
			// A publish cut off mid-flight returns an error; the producer retries,
			// which may store the message twice (at-least-once), never zero times.
			for {
				if err := tr.Publish(ctx, m); err == nil {
					break
				} else if ctx.Err() != nil {
					return
				}
				mu.Lock()
				retried++
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
			disrupt(i)
		}
	}()
	var wg sync.WaitGroup
	workCtx, stop := context.WithCancel(ctx)
	defer stop()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				d, err := c.Receive(workCtx)
				if err != nil {
					return
				}
				time.Sleep(3 * time.Millisecond) // the handler's work: deliveries are in flight when the link dies
				err = c.Settle(workCtx, d, transport.Settlement{Outcome: transport.Ack})
				mu.Lock()
				switch {
				case err == nil:
					if acked[string(d.Body)] > 0 && d.Redeliveries > 0 {
						ackLost++
					}
					acked[string(d.Body)]++
				case errors.Is(err, ErrDeliveryLost):
					lost[string(d.Body)]++
				case workCtx.Err() != nil:
				default:
					t.Errorf("Settle: %v", err)
				}
				mu.Unlock()
			}
		}()
	}
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-time.After(100 * time.Millisecond):
			select {
			case <-published:
				mu.Lock()
				done = len(acked) == n
				mu.Unlock()
			default:
			}
		}
	}
	// Let any repeat still in flight arrive before counting.
	time.Sleep(500 * time.Millisecond)
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	missing := 0
	for i := range n {
		b := fmt.Sprintf(`{"job":"urn:babel:t:mid","n":%d}`, i)
		if acked[b] == 0 {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d messages never acknowledged", missing, n)
	}
	repeats := 0
	for _, k := range acked {
		repeats += k - 1
	}
	t.Logf("%d messages acknowledged (%d repeats), %d settles reported a lost delivery, %d publishes retried, %d acks lost with their connection",
		len(acked), repeats, len(lost), retried, ackLost)
	if repeats > len(lost)+retried+ackLost {
		t.Errorf("%d messages acknowledged twice, more than the %d lost settles, %d retried publishes and %d lost acks explain",
			repeats, len(lost), retried, ackLost)
	}
	conn, err := amqp091.Dial(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	info, err := ch.QueueDeclare(q, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Messages != 0 {
		t.Errorf("%d messages left on the queue after every message was acknowledged", info.Messages)
	}
}
