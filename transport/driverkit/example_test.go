package driverkit_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// line is the raw message of a toy broker: what its client hands out.
type line struct {
	tag  int
	body string
}

// lineDriver is a whole driver for a toy broker whose client is a Go channel: each
// method is one broker primitive, and the kit does the rest.
type lineDriver struct {
	in  chan line
	kit *driverkit.Consumer[line]
}

func (d *lineDriver) Receive(ctx context.Context, into []line) (int, error) {
	select {
	case m := <-d.in:
		into[0] = m
		return 1, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-d.kit.Done(): // the consumer closes
		return 0, transport.ErrClosed
	}
}

func (d *lineDriver) Decode(m line, out *transport.Delivery) { out.Body = []byte(m.body) }

func (d *lineDriver) Ack(_ context.Context, m line) error {
	fmt.Println("broker: ack", m.tag)
	return nil
}

func (d *lineDriver) GiveBack(_ context.Context, ms []line, why driverkit.Reason) error {
	for _, m := range ms {
		fmt.Println("broker: give back", m.tag, "("+why.String()+")")
	}
	return nil
}

// Write hands the settle writes over; this broker confirms them at once (a nil Confirm).
func (d *lineDriver) Write(_ context.Context, m line, ws []*transport.Message) (driverkit.Confirm, error) {
	for _, w := range ws {
		fmt.Printf("broker: write %q to %s for %d\n", w.Body, w.Queue, m.tag)
	}
	return nil, nil
}

func (d *lineDriver) IsRetryable(error) bool { return false }

func (d *lineDriver) Close(context.Context) error {
	fmt.Println("broker: close")
	return nil
}

// A driver supplies its broker's primitives; driverkit.New makes the consumer the
// runtime uses: prefetch, settle-once, writes before the acknowledgement, give-back
// on Close.
func Example() {
	d := &lineDriver{in: make(chan line, 3)}
	d.in <- line{1, "first"}
	d.in <- line{2, "second"}
	d.in <- line{3, "third"}
	c, err := driverkit.New[line](d, driverkit.Config{Broker: "lines", Queue: "orders", ConcurrentReceive: true},
		transport.ConsumeOptions{Prefetch: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	d.kit = c
	ctx := context.Background()

	first, _ := c.Receive(ctx)
	fmt.Println("runtime: got", string(first.Body), "from", first.Queue)
	_ = c.Settle(ctx, first, transport.Settlement{Outcome: transport.Ack})

	second, _ := c.Receive(ctx)
	retry := &transport.Message{Queue: "orders", Body: []byte(`retry of second`)}
	_ = c.Settle(ctx, second, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{retry}})
	err = c.Settle(ctx, second, transport.Settlement{Outcome: transport.Rewind})
	fmt.Println("runtime: settled twice:", errors.Is(err, transport.ErrAlreadySettled))

	_, _ = c.Receive(ctx) // the third, never settled: Close gives it back
	fmt.Println("runtime: close:", c.Close(ctx))
	// Output:
	// runtime: got first from orders
	// broker: ack 1
	// broker: write "retry of second" to orders for 2
	// broker: ack 2
	// runtime: settled twice: true
	// broker: give back 3 (closing)
	// broker: close
	// runtime: close: <nil>
}
