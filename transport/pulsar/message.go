package pulsar

import (
	"strconv"
	"time"

	pc "github.com/apache/pulsar-client-go/pulsar"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// The message properties of the Pulsar binding (SPEC §7.5). All are strings.
const (
	PropJob           = driverkit.PropJob           // the URN
	PropTraceID       = driverkit.PropTraceID       // trace_id
	PropMessageID     = driverkit.PropMessageID     // meta.id
	PropSchemaVersion = driverkit.PropSchemaVersion // meta.schema_version, as a decimal string
	PropSourceLang    = driverkit.PropSourceLang    // meta.lang
	PropAttempts      = "bq-attempts"               // attempts, as a decimal string
)

// projected reports whether name is one of the binding's own properties; they never
// appear in [transport.Delivery.Headers] and a header never replaces one.
func projected(name string) bool {
	switch name {
	case PropJob, PropTraceID, PropMessageID, PropSchemaVersion, PropSourceLang, PropAttempts:
		return true
	}
	return false
}

// Properties returns the Pulsar message properties a write of m carries: the projection
// of m's envelope fields (only those known, for a raw write), bq-attempts from
// m.Attempts, and m's out-of-band headers beside them.
func Properties(m *transport.Message) map[string]string {
	props := make(map[string]string, 6+len(m.Headers))
	for k, v := range m.Headers {
		if !projected(k) {
			props[k] = v
		}
	}
	driverkit.Project(m.Projection, func(name, v string, _ bool, _ int64) {
		if name != driverkit.PropCreatedAt { // the event time carries it
			props[name] = v
		}
	})
	props[PropAttempts] = strconv.Itoa(max(m.Attempts, 0))
	return props
}

// producerMessage builds the Pulsar write of m. The payload is m.Body unchanged. A
// non-empty key becomes the message key; the Pulsar Go client cannot send an empty
// key, so an empty key is written as no key.
func producerMessage(m *transport.Message) *pc.ProducerMessage {
	pm := &pc.ProducerMessage{
		Payload:    m.Body,
		Properties: Properties(m),
	}
	if len(m.Key) > 0 {
		pm.Key = string(m.Key)
	}
	if m.Delay > 0 {
		pm.DeliverAfter = m.Delay
	}
	if m.Projection.CreatedAt > 0 {
		pm.EventTime = time.UnixMilli(m.Projection.CreatedAt)
	}
	return pm
}

// deliveryFields fills d from a received message: body, key, out-of-band headers,
// redelivery count and attempts header. Nothing in msg can make it panic.
func deliveryFields(d *transport.Delivery, msg pc.Message) {
	if p := msg.Payload(); p != nil {
		d.Body = p
	} else {
		d.Body = []byte{}
	}
	if k := msg.Key(); k != "" {
		d.Key = []byte(k)
	}
	for k, v := range msg.Properties() {
		if k == PropAttempts {
			d.AttemptsHeader, d.HasAttemptsHeader = driverkit.ParseAttempts(v)
			continue
		}
		if projected(k) {
			continue
		}
		driverkit.SetHeader(d, k, v)
	}
	d.Redeliveries = int(msg.RedeliveryCount())
}
