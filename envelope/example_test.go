package envelope_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
)

func ExampleMake() {
	env, err := envelope.Make("urn:babel:orders:created", map[string]any{"order_id": 1042},
		envelope.WithQueue("orders"),
		envelope.WithTraceID("7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"),
		envelope.WithID("f1e2d3c4-b5a6-4789-90ab-cdef01234567"),
		envelope.WithCreatedAt(time.UnixMilli(1749132727000)),
	)
	if err != nil {
		panic(err)
	}
	body, _ := env.Encode()
	fmt.Println(string(body))
	// Output:
	// {"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":0}
}

func ExampleDecode() {
	body := []byte(`{"urn":"urn:babel:orders:created","trace_id":"t-1","data":{"order_id":1042,"big":123456789012345678901},"meta":{"id":"m-1","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":2}`)
	env, err := envelope.Decode(body)
	if err != nil {
		panic(err)
	}
	fmt.Println(env.Job, env.Attempts, env.Accepts() == nil)
	fmt.Println(string(env.Data))

	var order struct {
		OrderID int `json:"order_id"`
	}
	_ = env.Bind(&order)
	fmt.Println(order.OrderID)

	_, err = envelope.Decode([]byte(`{"JOB":"urn:x"}`))
	var pe *envelope.PoisonError
	fmt.Println(errors.Is(err, envelope.ErrPoison), errors.As(err, &pe) && pe.Reason == envelope.ReasonIdentityLess)
	// Output:
	// urn:babel:orders:created 2 true
	// {"order_id":1042,"big":123456789012345678901}
	// 1042
	// true true
}

func ExamplePoisonBody() {
	dl := envelope.DeadLetter{FailedAt: 1749132730000, OriginalQueue: "orders", Attempts: 0}
	// A strict JSON object is spliced: its bytes are kept.
	fmt.Println(string(envelope.PoisonBody([]byte(`{"x":1e400}`), dl)))
	// Anything else is wrapped; bytes that are not UTF-8 travel as base64.
	fmt.Println(string(envelope.PoisonBody([]byte(`[NaN]`), dl)))
	fmt.Println(string(envelope.PoisonBody([]byte("{\"x\":\"\xff\"}"), dl)))
	// Output:
	// {"x":1e400,"dead_letter":{"reason":"poison","error":null,"exception":null,"failed_at":1749132730000,"original_queue":"orders","attempts":0,"lang":"go"}}
	// {"raw":"[NaN]","dead_letter":{"reason":"poison","error":null,"exception":null,"failed_at":1749132730000,"original_queue":"orders","attempts":0,"lang":"go"}}
	// {"raw":"eyJ4Ijoi/yJ9","raw_encoding":"base64","dead_letter":{"reason":"poison","error":null,"exception":null,"failed_at":1749132730000,"original_queue":"orders","attempts":0,"lang":"go"}}
}

func ExampleSetAttempts() {
	body := []byte(`{"job":"urn:a", "attempts": 1, "x": 1e400}`)
	out, _ := envelope.SetAttempts(body, 2)
	fmt.Println(string(out))
	// Output:
	// {"job":"urn:a", "attempts": 2, "x": 1e400}
}

// A received body's retry and dead letter, written from the decoded envelope: every
// byte the runtime does not own stays as received (the spaces, the member order).
func ExampleEnvelope_RetryBody() {
	env, err := envelope.Decode([]byte(`{"job":"urn:babel:orders:created", "data":{"id":7}, "trace_id":"t", "attempts":1}`))
	if err != nil {
		panic(err)
	}
	retry, _ := env.RetryBody(2)
	fmt.Println(string(retry))
	msg := "payment refused"
	dead, _ := env.DeadLetterBody(envelope.DeadLetter{Reason: envelope.ReasonFailed, Error: &msg, OriginalQueue: "orders", Attempts: 3, FailedAt: 1749132727000})
	fmt.Println(string(dead))
	// Output:
	// {"job":"urn:babel:orders:created", "data":{"id":7}, "trace_id":"t", "attempts":2}
	// {"job":"urn:babel:orders:created", "data":{"id":7}, "trace_id":"t", "attempts":3,"dead_letter":{"reason":"failed","error":"payment refused","exception":null,"failed_at":1749132727000,"original_queue":"orders","attempts":3,"lang":"go"}}
}
