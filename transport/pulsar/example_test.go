package pulsar_test

import (
	"context"
	"fmt"
	"log"
	"time"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport/pulsar"
)

// Open a runtime on Pulsar by URL: a Shared subscription named "billing" on the topic
// persistent://public/default/orders.
func Example() {
	ctx := context.Background()
	app, err := babelqueue.Open(ctx, "pulsar://127.0.0.1:6650?subscription=billing", babelqueue.WithQueue("orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = app.Close(ctx) }()
	app.Handle("urn:babel:orders:created", func(_ context.Context, m *babelqueue.Message) error {
		fmt.Println("order", m.ID(), "attempt", m.Attempts)
		return nil
	})
	if err := app.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Build the transport around a client you configured yourself, here with token
// authentication over TLS.
func ExampleNew() {
	client, err := pc.NewClient(pc.ClientOptions{
		URL:            "pulsar+ssl://pulsar.internal:6651",
		Authentication: pc.NewAuthenticationToken("eyJhbGciOi..."),
	})
	if err != nil {
		log.Fatal(err)
	}
	tr, err := pulsar.New(client,
		pulsar.WithSubscription("billing"),
		pulsar.WithSubscriptionType(pulsar.KeyShared),
		pulsar.WithNackRedeliveryDelay(2*time.Second),
		pulsar.WithCloseClient(),
	)
	if err != nil {
		log.Fatal(err)
	}
	app, err := babelqueue.New(tr, babelqueue.WithQueue("persistent://acme/billing/orders"), babelqueue.WithDeadLetter(true))
	if err != nil {
		log.Fatal(err)
	}
	_ = app // app.Handle(…); app.Run(ctx)
}
