package schema_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/schema"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// A schema given in code; a violation names the place in data and the rule.
func ExampleCompile() {
	s, err := schema.Compile("urn:babel:orders:created", []byte(`{
		"type": "object",
		"required": ["order_id"],
		"properties": {"order_id": {"type": "integer", "minimum": 1}}
	}`))
	if err != nil {
		panic(err)
	}
	err = s.Validate([]byte(`{"order_id": 0}`))
	var ve *schema.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(ve.Pointer, ve.Keyword)
	}
	fmt.Println(err)
	// Output:
	// /order_id minimum
	// schema: urn:babel:orders:created: data at /order_id violates "minimum": got 0, want 1
}

// A babelqueue-registry read from its directory: every schema it lists is compiled here.
func ExampleLoadRegistry() {
	reg, err := schema.LoadRegistry("testdata/registry")
	if err != nil {
		panic(err)
	}
	fmt.Println(reg.URNs())
	paths, _ := reg.Schema("urn:babel:users:registered").SensitivePaths()
	for _, p := range paths {
		fmt.Println(p.Path)
	}
	// Output:
	// [urn:babel:invoices:issued urn:babel:orders:created urn:babel:users:registered]
	// addresses[].line
	// billing
	// email
	// phone
	// profile.full_name
	// profile.national_id
}

// The producer side: invalid data never reaches the broker.
func ExamplePublishCheck() {
	reg, err := schema.LoadRegistry("testdata/registry")
	if err != nil {
		panic(err)
	}
	app, err := babelqueue.New(memory.New(), babelqueue.WithQueue("orders"),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		panic(err)
	}
	defer app.Close(context.Background())
	app.UsePublish(schema.PublishCheck(reg))

	_, err = app.Publish(context.Background(), "urn:babel:orders:created", map[string]any{"order_id": 1042, "amount": -1})
	fmt.Println(errors.Is(err, schema.ErrInvalid))
	fmt.Println(err)
	// Output:
	// true
	// schema: urn:babel:orders:created: data at /amount violates "minimum": got -1, want 0
}

// The consumer side: invalid data is dead-lettered on its first delivery, with the
// violation, and the handler never sees it.
func ExampleMiddleware() {
	reg, err := schema.LoadRegistry("testdata/registry")
	if err != nil {
		panic(err)
	}
	broker := memory.New()
	app, err := babelqueue.New(broker,
		babelqueue.WithQueue("orders"),
		babelqueue.WithDeadLetter(true),
		babelqueue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		panic(err)
	}
	defer app.Close(context.Background())
	app.Use(schema.Middleware(reg))
	app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error {
		fmt.Println("handler ran")
		return nil
	})
	// Published without the producer check, as a producer in another language may.
	if _, err := app.Publish(context.Background(), "urn:babel:orders:created", map[string]any{"order_id": "1042", "amount": 5}); err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		for len(broker.Messages(app.DeadLetterQueue())) == 0 {
			time.Sleep(time.Millisecond)
		}
		stop()
	}()
	_ = app.Run(ctx)

	var dead struct {
		DeadLetter struct {
			Reason string `json:"reason"`
			Error  string `json:"error"`
		} `json:"dead_letter"`
	}
	_ = json.Unmarshal(broker.Messages(app.DeadLetterQueue())[0].Body, &dead)
	fmt.Println(dead.DeadLetter.Reason)
	fmt.Println(dead.DeadLetter.Error)
	// Output:
	// failed
	// schema: urn:babel:orders:created: data at /order_id violates "type": got string, want integer
}

// Divergences finds what another SDK of the family evaluates differently before a
// mixed fleet meets it: here the Python SDK 1.24.0 calls 1.0 not in the enum, and rejects
// "note" as an additional property.
func ExampleSchema_Divergences() {
	s, err := schema.Compile("urn:babel:orders:created", []byte(`{
		"type": "object",
		"properties": {"qty": {"enum": [1, 2, 3]}, "note": true, "sku": {"type": "string"}},
		"additionalProperties": false}`))
	if err != nil {
		panic(err)
	}
	for _, d := range s.Divergences() {
		fmt.Println(d.Location, d.Harm)
	}
	// Output:
	// #/properties/note rejects-valid
	// #/properties/qty/enum rejects-valid
}
