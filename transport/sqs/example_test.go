package sqs_test

import (
	"context"
	"fmt"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport/sqs"
)

// Open a runtime on SQS by URL: credentials come from the default AWS chain.
func Example() {
	ctx := context.Background()
	app, err := babelqueue.Open(ctx, "sqs://us-east-1?endpoint=http://127.0.0.1:9324&wait_time=5", babelqueue.WithQueue("orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close(ctx)
	app.Handle("urn:babel:orders:created", func(ctx context.Context, m *babelqueue.Message) error {
		fmt.Printf("order %s, attempt %d\n", m.Envelope.Data, m.Attempts)
		return nil
	})
	_ = app.Run(ctx)
}

// Build the transport around a client you configured yourself, here a FIFO transport
// whose writes all go to one message group.
func ExampleNew() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("eu-central-1"))
	if err != nil {
		log.Fatal(err)
	}
	client := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) { o.BaseEndpoint = aws.String("http://127.0.0.1:9324") })
	tr, err := sqs.New(client, sqs.WithFIFO(true), sqs.WithGroupID("tenant-42"))
	if err != nil {
		log.Fatal(err) // an option's bad value
	}
	app, err := babelqueue.New(tr, babelqueue.WithQueue("orders"), babelqueue.WithDeadLetter(true))
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close(ctx)
	fmt.Println(app.DeadLetterQueue(), tr.QueueName(app.DeadLetterQueue()))
}
