package driverkit

import (
	"strconv"

	"github.com/babelqueue-go/babelqueue/transport"
)

// The property names under which bindings carry the envelope's fields (SPEC §7; the
// conformance manifest's bindings that use named properties: SQS, Pulsar, Kafka).
const (
	PropJob           = "bq-job"            // the URN
	PropTraceID       = "bq-trace-id"       // trace_id
	PropMessageID     = "bq-message-id"     // meta.id
	PropSchemaVersion = "bq-schema-version" // meta.schema_version
	PropSourceLang    = "bq-source-lang"    // meta.lang
	PropCreatedAt     = "bq-created-at"     // meta.created_at, Unix milliseconds
)

// Project calls set for each field of p that is known (not its zero value), in the
// order of the constants above, with the property name, the value as text, and
// whether the field is a number (schema version, created at) with its value n. A
// driver encodes each as its broker types properties.
func Project(p transport.Projection, set func(name, text string, number bool, n int64)) {
	if p.URN != "" {
		set(PropJob, p.URN, false, 0)
	}
	if p.TraceID != "" {
		set(PropTraceID, p.TraceID, false, 0)
	}
	if p.MessageID != "" {
		set(PropMessageID, p.MessageID, false, 0)
	}
	if p.SchemaVersion != 0 {
		set(PropSchemaVersion, strconv.Itoa(p.SchemaVersion), true, int64(p.SchemaVersion))
	}
	if p.Lang != "" {
		set(PropSourceLang, p.Lang, false, 0)
	}
	if p.CreatedAt != 0 {
		set(PropCreatedAt, strconv.FormatInt(p.CreatedAt, 10), true, p.CreatedAt)
	}
}

// SetHeader sets the out-of-band header name of d to value, making d.Headers on first
// use: how a driver's Decode hands over a property that is not the binding's own.
func SetHeader(d *transport.Delivery, name, value string) {
	if d.Headers == nil {
		d.Headers = map[string]string{}
	}
	d.Headers[name] = value
}
