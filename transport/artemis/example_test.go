package artemis_test

import (
	"context"
	"fmt"
	"log"
	"net/url"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport/artemis"
)

// Open a BabelQueue app on Artemis by URL: importing the package registers artemis://.
func Example() {
	ctx := context.Background()
	app, err := babelqueue.Open(ctx, "artemis://artemis:secret@127.0.0.1:5672", babelqueue.WithQueue("orders"), babelqueue.WithDeadLetter(true))
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close(ctx)
	app.Handle("urn:babel:orders:created", func(ctx context.Context, m *babelqueue.Message) error {
		fmt.Println("order", m.ID(), "attempt", m.Attempts)
		return nil
	})
	if err := app.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Build the transport around a connection you dial yourself (here from a URL; use
// amqp.Dial with your own TLS or SASL options the same way), and let it dial again
// after the connection drops.
func ExampleNew() {
	ctx := context.Background()
	dial := func(ctx context.Context) (*amqp.Conn, error) {
		return artemis.DialURL(ctx, "artemis+ssl://svc-orders:secret@mq.internal:5671")
	}
	conn, err := dial(ctx)
	if err != nil {
		log.Fatal(err)
	}
	tr, err := artemis.New(conn, artemis.WithDial(dial))
	if err != nil {
		log.Fatal(err)
	}
	app, err := babelqueue.New(tr, babelqueue.WithQueue("orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close(ctx)
}

// ParseURL shows what a URL dials, without the password.
func ExampleParseURL() {
	u, _ := url.Parse("artemis+ssl://svc:secret@mq.internal?idle_timeout=30s")
	cfg, err := artemis.ParseURL(u)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cfg, cfg.IdleTimeout)
	// Output: amqps://mq.internal:5671 (user "svc") 30s
}
