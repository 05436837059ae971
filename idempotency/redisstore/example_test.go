package redisstore_test

import (
	"context"
	"log"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/idempotency"
	"github.com/babelqueue-go/babelqueue/idempotency/redisstore"
)

// A fleet's workers share one Redis store; PHP workers on the same queue would need
// redisstore.WithLayout(redisstore.LayoutPHP) on every Go worker.
func ExampleNew() {
	ctx := context.Background()
	store, err := redisstore.New(ctx, "redis://127.0.0.1:6379/0", redisstore.WithTTL(7*24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	dedupe, err := idempotency.Middleware(store, idempotency.WithLease(2*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	app, err := babelqueue.Open(ctx, "redis://127.0.0.1:6379/0", babelqueue.WithQueue("orders"))
	if err != nil {
		log.Fatal(err)
	}
	app.Use(dedupe)
	app.Handle("urn:babel:orders:created", func(ctx context.Context, m *babelqueue.Message) error {
		return nil // charge the card: once per meta.id
	})
	_ = app.Run(ctx)
}
