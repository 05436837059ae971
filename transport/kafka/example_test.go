package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
)

// ExampleOpen opens a transport whose crashed workers give their partitions up after
// 6 s (the broker's minimum by default), whose Publish waits for the broker, and which
// fails fast when no broker answers.
func ExampleOpen() {
	ctx := context.Background()
	tr, err := kafka.Open(ctx, "kafka://127.0.0.1:9092?group=billing&session_timeout=6s&heartbeat_interval=500ms&confirm=1&dial_timeout=3s")
	if err != nil {
		log.Fatal(err) // a *transport.BadURLError for a bad parameter, or no broker within 3 s
	}
	defer tr.Close(ctx)
	fmt.Println(tr.Capabilities().PublishConfirmed)
}

// ExampleTransport_Publish shows the two ways a fire-and-forget publish can fail: at
// once, for a message larger than the broker or the producer accepts, and later, for a
// record the broker refuses, which Flush (or Close) reports.
func ExampleTransport_Publish() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := kafka.Open(ctx, "kafka://127.0.0.1:9092")
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close(ctx)
	body := []byte(`{"job":"urn:babel:orders:created","data":{}}`)
	err = tr.Publish(ctx, &transport.Message{Queue: "orders", Body: body})
	var tooLarge *transport.TooLargeError
	if errors.As(err, &tooLarge) {
		log.Printf("%d bytes, over the limit of %d", tooLarge.Size, tooLarge.Limit)
	}
	var lost *kafka.UndeliveredError
	if err := tr.Flush(ctx); errors.As(err, &lost) {
		log.Printf("%d publishes were not delivered: %v", lost.Count, err)
	}
}
