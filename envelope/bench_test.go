package envelope

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// benchOrder is the order-created envelope (the conformance fixture's values), compact.
var benchOrder = []byte(`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":0}`)

// bench64K is a 64 KiB envelope whose data holds an array of line items.
var bench64K = func() []byte {
	var items []string
	size := 0
	for i := 0; size < 64*1024-400; i++ {
		it := fmt.Sprintf(`{"sku":"SKU-%06d","title":"Caf\u00e9 item %d — naïve","qty":%d,"price_cents":%d,"ratio":0.%d,"active":true,"note":null}`, i, i, i%7, 1299+i, i%10)
		items = append(items, it)
		size += len(it) + 1
	}
	return []byte(`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042,"items":[` +
		strings.Join(items, ",") + `]},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":0}`)
}()

// bench64KText is a 64 KiB envelope whose data is mostly long strings (notes of prose).
var bench64KText = func() []byte {
	var items []string
	size := 0
	for i := 0; size < 64*1024-400; i++ {
		it := fmt.Sprintf(`{"id":%d,"body":"%s"}`, i, strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 8))
		items = append(items, it)
		size += len(it) + 1
	}
	return []byte(`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"notes":[` +
		strings.Join(items, ",") + `]},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000},"attempts":0}`)
}()

// poison64K is bench64K without an identity: a full scan ending in a poison verdict.
var poison64K = []byte(strings.Replace(string(bench64K), `"job":`, `"JOB":`, 1))

var benchBodies = []struct {
	name string
	body []byte
}{{"order-created", benchOrder}, {"64KiB", bench64K}, {"64KiB-text", bench64KText}}

func BenchmarkMakeEncode(b *testing.B) {
	data := map[string]any{"order_id": 1042}
	at := time.UnixMilli(1749132727000)
	b.Run("envelope", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e, err := Make("urn:babel:orders:created", data, WithQueue("orders"), WithCreatedAt(at))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := e.Encode(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := map[string]any{
				"job": "urn:babel:orders:created", "trace_id": NewUUID(), "data": data,
				"meta": map[string]any{"id": NewUUID(), "queue": "orders", "lang": Lang,
					"schema_version": SchemaVersion, "created_at": at.UnixMilli()},
				"attempts": 0,
			}
			if _, err := json.Marshal(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	for _, bb := range benchBodies {
		b.Run(bb.name+"/envelope", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			for b.Loop() {
				e, err := Decode(bb.body)
				if err != nil || e.Accepts() != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bb.name+"/baseline-map", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			for b.Loop() {
				var m map[string]any
				if err := json.Unmarshal(bb.body, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPoisonScan measures the verdict on a body that is poison only
// once the whole body has been scanned (identity-less), and the dead-letter
// body built for it.
func BenchmarkPoisonScan(b *testing.B) {
	small := []byte(strings.Replace(string(benchOrder), `"job":`, `"JOB":`, 1))
	for _, bb := range []struct {
		name string
		body []byte
	}{{"order-created", small}, {"64KiB", poison64K}} {
		b.Run(bb.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			for b.Loop() {
				if _, err := Decode(bb.body); err == nil {
					b.Fatal("not poison")
				}
			}
		})
		b.Run(bb.name+"/poison-body", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			dl := DeadLetter{FailedAt: failedAtMs, OriginalQueue: "orders"}
			for b.Loop() {
				_ = PoisonBody(bb.body, dl)
			}
		})
		b.Run(bb.name+"/baseline-map", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			for b.Loop() {
				var m map[string]any
				if err := json.Unmarshal(bb.body, &m); err != nil {
					b.Fatal(err)
				}
				if _, ok := m["job"].(string); ok {
					b.Fatal("not poison")
				}
			}
		})
	}
}

// BenchmarkSettleBodies is the body of a retry and of a dead letter built from a
// decoded envelope (the spans Decode recorded) beside the scanning editors on the
// same bytes, which scan the body again (twice for a dead letter whose attempts
// change).
func BenchmarkSettleBodies(b *testing.B) {
	msg, typ := "payment service refused", "errors.errorString"
	dl := DeadLetter{Reason: ReasonFailed, Error: &msg, Exception: &typ, OriginalQueue: "orders", Attempts: 3, FailedAt: 1749132727000}
	for _, bb := range benchBodies {
		env, err := Decode(bb.body)
		if err != nil {
			b.Fatal(err)
		}
		run := func(name string, f func() ([]byte, error)) {
			b.Run(bb.name+"/"+name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(bb.body)))
				for b.Loop() {
					if _, err := f(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		run("retry", func() ([]byte, error) { return env.RetryBody(2) })
		run("retry-rescan", func() ([]byte, error) { return SetAttempts(bb.body, 2) })
		run("dead-letter", func() ([]byte, error) { return env.DeadLetterBody(dl) })
		run("dead-letter-rescan", func() ([]byte, error) {
			body, err := SetAttempts(bb.body, dl.Attempts)
			if err != nil {
				return nil, err
			}
			return AppendDeadLetter(body, dl)
		})
	}
}
