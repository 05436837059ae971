package outbox_test

import (
	"context"
	"fmt"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/outbox"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// A message written in the outbox goes out when the relay runs. With a database store
// (outbox/pgstore) pass the *sql.Tx of the business write instead of nil: the row then
// commits or rolls back with it.
func Example() {
	ctx := context.Background()
	tr := memory.New()
	app, _ := babelqueue.New(tr, babelqueue.WithQueue("orders"))
	store := outbox.NewMemoryStore()

	w := outbox.NewWriter(app, store)
	_, _ = w.Write(ctx, nil, "urn:babel:orders:paid", map[string]int{"order_id": 1042},
		babelqueue.WithKey([]byte("1042")))
	fmt.Println("on the broker before the relay:", len(tr.Messages("orders")))

	relay := outbox.NewRelay(store, tr, outbox.WithBatchSize(100))
	res, _ := relay.Drain(ctx)
	fmt.Println("relayed:", res.Published)
	fmt.Println("on the broker after the relay:", len(tr.Messages("orders")))
	// Output:
	// on the broker before the relay: 0
	// relayed: 1
	// on the broker after the relay: 1
}

// Run relays until its context ends, then returns once the batch in flight is
// committed.
func ExampleRelay_Run() {
	tr := memory.New()
	store := outbox.NewMemoryStore()
	relay := outbox.NewRelay(store, tr)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a signal handler would do this
	fmt.Println(relay.Run(ctx))
	// Output: <nil>
}
