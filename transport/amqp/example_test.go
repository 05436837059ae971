package amqp_test

import (
	"context"
	"crypto/tls"
	"log"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport/amqp"
)

// Open a runtime on RabbitMQ by URL: importing the package registers amqp:// and amqps://.
func Example() {
	ctx := context.Background()
	app, err := babelqueue.Open(ctx, "amqp://guest:guest@127.0.0.1:5672/?connection_name=billing",
		babelqueue.WithQueue("orders"), babelqueue.WithDeadLetter(true))
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close(ctx)
	if _, err := app.Publish(ctx, "urn:babel:orders:created", map[string]any{"order_id": 1042}); err != nil {
		log.Fatal(err)
	}
}

// Build the transport with options a URL cannot carry, here a TLS configuration.
func ExampleDial() {
	ctx := context.Background()
	tr, err := amqp.Dial(ctx, "amqps://app:secret@rabbit.internal:5671/prod",
		amqp.WithTLSConfig(&tls.Config{MinVersion: tls.VersionTLS13}),
		amqp.WithConfirmTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	app, err := babelqueue.New(tr, babelqueue.WithQueue("orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close(ctx)
}

// Wrap a connection you opened yourself; WithRedial lets the transport replace it when
// it is lost.
func ExampleNew() {
	dial := func(context.Context) (*amqp091.Connection, error) {
		return amqp091.Dial("amqp://guest:guest@127.0.0.1:5672/")
	}
	conn, err := dial(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	tr, err := amqp.New(conn, amqp.WithRedial(dial))
	if err != nil {
		log.Fatal(err)
	}
	_ = tr
}
