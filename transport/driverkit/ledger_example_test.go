package driverkit_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// A driver that keeps a Ledger itself hands out under a slot, settles once, and gives
// back on Close.
func ExampleLedger() {
	ctx := context.Background()
	book := driverkit.NewLedger[string](driverkit.LedgerConfig{Broker: "mybroker", Queue: "orders", Prefetch: 2})

	// Receive: a slot, then the broker's message.
	_ = book.Acquire(ctx)
	e, _ := book.Hand("delivery-tag-1")
	d := &transport.Delivery{Queue: "orders", Handle: e}

	// Settle: Begin checks ownership, the settlement and settle-once; Finish frees the
	// slot (or keeps it for a Rewind when an Ack failed).
	s := transport.Settlement{Outcome: transport.Ack}
	if e, err := book.Begin(d, s); err == nil {
		var brokerErr error // the driver's acknowledgement
		fmt.Println("settled:", book.Finish(e, s, brokerErr))
	}
	_, err := book.Begin(d, s)
	fmt.Println("twice:", errors.Is(err, transport.ErrAlreadySettled))

	// Close gives back what is still open.
	_ = book.Acquire(ctx)
	_, _ = book.Hand("delivery-tag-2")
	fmt.Println("give back:", book.Close())
	// Output:
	// settled: <nil>
	// twice: true
	// give back: [delivery-tag-2]
}
