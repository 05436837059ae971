package schema_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/schema"
	"github.com/babelqueue-go/babelqueue/schema/internal/schematest"
)

// largeSchema validates the data of largeEnvelope: an order with many lines, each line
// checked for required fields, a pattern, minimums and a maxLength.
const largeSchema = `{
	"type": "object",
	"required": ["order_id", "lines"],
	"properties": {
		"order_id": {"type": "integer", "minimum": 1},
		"lines": {"type": "array", "minItems": 1, "items": {
			"type": "object",
			"required": ["sku", "qty", "price_cents"],
			"properties": {
				"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
				"qty": {"type": "integer", "minimum": 1},
				"price_cents": {"type": "integer", "minimum": 0},
				"note": {"type": "string", "maxLength": 200}
			},
			"additionalProperties": false
		}}
	},
	"additionalProperties": false
}`

// largeEnvelope returns an envelope whose data is about 64 KiB.
func largeEnvelope(b *testing.B) []byte {
	b.Helper()
	var lines []string
	size := 0
	for i := 0; size < 64<<10; i++ {
		l := fmt.Sprintf(`{"sku":"ABC-%04d","qty":%d,"price_cents":%d,"note":"gift wrap, leave at the door"}`, i%10000, i%7+1, i*13)
		lines = append(lines, l)
		size += len(l) + 1
	}
	data := `{"order_id":1042,"lines":[` + strings.Join(lines, ",") + `]}`
	env, err := envelope.Make("urn:babel:orders:created", json.RawMessage(data), envelope.WithQueue("orders"))
	if err != nil {
		b.Fatal(err)
	}
	body, err := env.Encode()
	if err != nil {
		b.Fatal(err)
	}
	return body
}

type benchCase struct {
	name string
	body []byte
	s    *schema.Schema
}

func benchCases(b *testing.B) []benchCase {
	b.Helper()
	small, err := os.ReadFile(filepath.Join(exampleRegistry, "messages", "order-created.json"))
	if err != nil {
		b.Fatal(err)
	}
	reg, err := schema.LoadRegistry(exampleRegistry)
	if err != nil {
		b.Fatal(err)
	}
	large, err := schema.Compile("urn:babel:orders:created", []byte(largeSchema))
	if err != nil {
		b.Fatal(err)
	}
	return []benchCase{
		{"order-created", small, reg.Schema("urn:babel:orders:created")},
		{"data-64KiB", largeEnvelope(b), large},
	}
}

func decodeOnly(b *testing.B, body []byte) {
	if _, err := envelope.Decode(body); err != nil {
		b.Fatal(err)
	}
}

func decodeValidate(b *testing.B, body []byte, s *schema.Schema) {
	env, err := envelope.Decode(body)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Validate(env.Data); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkValidatePaired times decode alone (base) and decode+validate (with) in turns
// inside one loop, so both see the same load on a shared machine.
func BenchmarkValidatePaired(b *testing.B) {
	for _, c := range benchCases(b) {
		b.Run(c.name, func(b *testing.B) {
			schematest.Paired(b, func() { decodeOnly(b, c.body) }, func() { decodeValidate(b, c.body, c.s) })
		})
	}
}

// BenchmarkValidate measures the schema check per message beside decoding the envelope
// alone (the baseline): the registry's order-created envelope and a 64 KiB data block.
func BenchmarkValidate(b *testing.B) {
	for _, c := range benchCases(b) {
		b.Run(c.name+"/decode", func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				decodeOnly(b, c.body)
			}
		})
		b.Run(c.name+"/decode+validate", func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				decodeValidate(b, c.body, c.s)
			}
		})
	}
}
