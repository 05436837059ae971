package servicebus_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/servicebus"
)

// Open with DefaultAzureCredential through the URL, as babelqueue.Open does.
func Example() {
	ctx := context.Background()
	app, err := babelqueue.Open(ctx, "sb://myns.servicebus.windows.net", babelqueue.WithQueue("orders"), babelqueue.WithDeadLetter(true))
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close(ctx)
	_ = app.Run(ctx)
}

// Open with a SAS connection string: it is an option, never part of the URL.
func ExampleOpen() {
	ctx := context.Background()
	tr, err := servicebus.Open(ctx, "sb://", servicebus.WithConnectionString(os.Getenv("SERVICEBUS_CONNECTION_STRING")),
		servicebus.WithLockRenewal(20*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	app, err := babelqueue.New(tr, babelqueue.WithQueue("orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close(ctx)
	_ = app.Run(ctx)
}

// Wrap a client you built yourself (websockets, TLS, retry options). The transport
// never closes it.
func ExampleNew() {
	client, err := azservicebus.NewClientFromConnectionString(os.Getenv("SERVICEBUS_CONNECTION_STRING"),
		&azservicebus.ClientOptions{ApplicationID: "orders-worker"})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
	tr, err := servicebus.New(client)
	if err != nil {
		log.Fatal(err)
	}
	_, _ = babelqueue.New(tr, babelqueue.WithQueue("orders"))
}

// The native fields and typed application properties a message carries.
func ExampleProject() {
	m, err := servicebus.Project(&transport.Message{
		Queue:   "orders",
		Body:    []byte(`{"job":"urn:babel:orders:created"}`),
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		Projection: transport.Projection{URN: "urn:babel:orders:created", TraceID: "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
			MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567", Lang: "go", SchemaVersion: 1, CreatedAt: 1749132727000},
	}, time.Now())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("Subject:", *m.Subject)
	fmt.Println("CorrelationID:", *m.CorrelationID)
	fmt.Println("MessageID:", *m.MessageID)
	fmt.Println("ContentType:", *m.ContentType)
	names := make([]string, 0, len(m.ApplicationProperties))
	for k := range m.ApplicationProperties {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Printf("%s: %T %v\n", k, m.ApplicationProperties[k], m.ApplicationProperties[k])
	}
	// Output:
	// Subject: urn:babel:orders:created
	// CorrelationID: 7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b
	// MessageID: f1e2d3c4-b5a6-4789-90ab-cdef01234567
	// ContentType: application/json
	// bq-created-at: int64 1749132727000
	// bq-schema-version: int32 1
	// bq-source-lang: string go
	// traceparent: string 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
}
