package schema_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/schema"
	"github.com/babelqueue-go/babelqueue/schema/internal/schematest"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// TestViolationNumbersAsJSON: a violation prints its numbers as JSON writes them, the
// exact integer or a decimal, never a rounded float, a locale's digit grouping or a
// superscript exponent; two different numbers never print the same.
func TestViolationNumbersAsJSON(t *testing.T) {
	many := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("1,", n), ",") + "]" }
	distinct := func(n int) string { // "[0,1,...,n-1" without its closing bracket
		var b strings.Builder
		b.WriteByte('[')
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(i))
		}
		return b.String()
	}
	for _, tc := range []struct {
		schema, data, want string
	}{
		{`{"minimum":1000000}`, `5`, "got 5, want 1000000"},
		{`{"maximum":9007199254740992}`, `9007199254740993`, "got 9007199254740993, want 9007199254740992"},
		{`{"maximum":9007199254740993}`, `9007199254740994`, "got 9007199254740994, want 9007199254740993"},
		{`{"exclusiveMinimum":12345678901234567890123}`, `12345678901234567890122`, "got 12345678901234567890122, want 12345678901234567890123"},
		{`{"minimum":0.1}`, `0.05`, "got 0.05, want 0.1"},
		{`{"minimum":-2.5e-3}`, `-1`, "got -1, want -0.0025"},
		{`{"maximum":1.5E+2}`, `150.5`, "got 150.5, want 150"},
		{`{"multipleOf":0.01}`, `1.234`, "got 1.234, want 0.01"},
		{`{"minimum":1e400}`, `5`, "got 5, want 1e+400"},
		{`{"exclusiveMaximum":1e-400}`, `1`, "got 1, want 1e-400"},
		{`{"maximum":1.25e-300}`, `1`, "got 1, want 1.25e-300"},
		{`{"minLength":1000}`, `"a"`, "got 1, want 1000"},
		{`{"minProperties":2000}`, `{}`, "got 0, want 2000"},
		{`{"maxItems":1000}`, many(1001), "got 1001, want 1000"},
		{`{"uniqueItems":true}`, distinct(1001) + `,1001,1001]`, "items at 1001 and 1002 are equal"},
		{`{"const":1000000}`, `5`, "value must be 1000000"},
		{`{"enum":[1000000,1e400]}`, `5`, "value must be one of 1000000, 1e400"},
	} {
		s, err := schema.Compile("urn:x", []byte(tc.schema))
		if err != nil {
			t.Fatal(err)
		}
		err = s.Validate([]byte(tc.data))
		if err == nil || !strings.HasSuffix(err.Error(), ": "+tc.want) {
			t.Errorf("%s on %.40s: %v\nwant the message %q", tc.schema, tc.data, err, tc.want)
		}
	}
}

// TestViolationNumbersOfDecodedData: data handed over already decoded holds float64
// numbers; each prints as encoding/json writes that float64.
func TestViolationNumbersOfDecodedData(t *testing.T) {
	for _, tc := range []struct {
		schema string
		data   any
		want   string
	}{
		{`{"minimum":0.2}`, 0.1, "got 0.1, want 0.2"},
		{`{"maximum":1e299}`, 1e300, "got 1e+300, want 1e+299"},
		{`{"maximum":1}`, 123456789.125, "got 123456789.125, want 1"},
		{`{"minimum":0.1234567890123456789012345678901234567890123}`, 0.0, "got 0, want 1.234567890123456789012345678901234567890123e-1"},
	} {
		s, err := schema.Compile("urn:x", []byte(tc.schema))
		if err != nil {
			t.Fatal(err)
		}
		err = s.ValidateValue(tc.data)
		if err == nil || !strings.HasSuffix(err.Error(), ": "+tc.want) {
			t.Errorf("%s on %v: %v\nwant the message %q", tc.schema, tc.data, err, tc.want)
		}
	}
}

// TestDeadLetterErrorNumbersAsJSON: the dead_letter.error of invalid data prints the
// numbers as JSON does.
func TestDeadLetterErrorNumbersAsJSON(t *testing.T) {
	s, err := schema.Compile(ordersURN, []byte(`{"type":"object","properties":{"amount":{"maximum":9007199254740993}}}`))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := schema.NewRegistry(s)
	if err != nil {
		t.Fatal(err)
	}
	broker := memory.New()
	app, rec := newApp(t, broker, &transporttest.LogBuffer{}, babelqueue.WithDeadLetter(true))
	app.Use(schema.Middleware(reg))
	app.Handle(ordersURN, func(context.Context, *babelqueue.Message) error { return nil })
	if _, err := app.Publish(context.Background(), ordersURN, json.RawMessage(`{"amount":9007199254740994}`)); err != nil {
		t.Fatal(err)
	}
	schematest.RunUntilSettled(t, app, rec, 1)
	dlq := broker.Messages(app.DeadLetterQueue())
	if len(dlq) != 1 {
		t.Fatalf("%d messages on the DLQ", len(dlq))
	}
	var body struct {
		DeadLetter struct{ Error string } `json:"dead_letter"`
	}
	if err := json.Unmarshal(dlq[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if want := `data at /amount violates "maximum": got 9007199254740994, want 9007199254740993`; !strings.HasSuffix(body.DeadLetter.Error, want) {
		t.Fatalf("dead_letter.error %q, want it to end with %q", body.DeadLetter.Error, want)
	}
}
