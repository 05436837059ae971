package servicebus

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Application property names of the binding (SPEC §7 binding §4, manifest block "asb").
const (
	// PropSchemaVersion carries meta.schema_version as an AMQP int; the schema-version
	// gate reads it on consume.
	PropSchemaVersion = "bq-schema-version"
	// PropSourceLang carries meta.lang as a string.
	PropSourceLang = "bq-source-lang"
	// PropCreatedAt carries meta.created_at (Unix ms) as an AMQP long.
	PropCreatedAt = "bq-created-at"
	// PropAttempts carries [transport.Message.Attempts] as an AMQP int. It is written only
	// when the count is above zero (absent means zero) and is where the count of a body
	// that cannot be decoded (poison) rides.
	PropAttempts = "bq-attempts"
)

// ContentType is the content type of every message the transport writes.
const ContentType = "application/json"

// MaxKeyLength is the longest [transport.Message.Key] Service Bus accepts as a
// PartitionKey, in bytes.
const MaxKeyLength = 128

// ErrInvalidKey is returned by Publish and Settle for a key that cannot be a Service Bus
// PartitionKey: not valid UTF-8, or longer than [MaxKeyLength] bytes.
var ErrInvalidKey = errors.New("servicebus: key cannot be a PartitionKey")

var errSDKPanic = errors.New("servicebus: the SDK panicked converting a received message")

// Project builds the Service Bus message the transport sends for m (manifest block
// "asb"): the body unchanged, Subject = URN, CorrelationID = trace_id, MessageID =
// meta.id, the typed bq- application properties, the headers, the key as PartitionKey
// and the delay as ScheduledEnqueueTime (from now).
func Project(m *transport.Message, now time.Time) (*azservicebus.Message, error) {
	out := &azservicebus.Message{Body: m.Body, ContentType: to.Ptr(ContentType)}
	p := m.Projection
	if p.URN != "" {
		out.Subject = to.Ptr(p.URN)
	}
	if p.TraceID != "" {
		out.CorrelationID = to.Ptr(p.TraceID)
	}
	if p.MessageID != "" {
		out.MessageID = to.Ptr(p.MessageID)
	}
	if m.Key != nil {
		if !utf8.Valid(m.Key) {
			return nil, fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
		}
		if len(m.Key) > MaxKeyLength {
			return nil, fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidKey, len(m.Key), MaxKeyLength)
		}
		out.PartitionKey = to.Ptr(string(m.Key))
	}
	if m.Delay > 0 {
		out.ScheduledEnqueueTime = to.Ptr(now.Add(m.Delay).UTC())
	}
	props := make(map[string]any, len(m.Headers)+4)
	for k, v := range m.Headers {
		props[k] = v
	}
	if p.SchemaVersion != 0 {
		props[PropSchemaVersion] = clampInt32(int64(p.SchemaVersion))
	}
	if p.Lang != "" {
		props[PropSourceLang] = p.Lang
	}
	if p.CreatedAt != 0 {
		props[PropCreatedAt] = p.CreatedAt
	}
	if m.Attempts > 0 {
		props[PropAttempts] = clampInt32(int64(m.Attempts))
	}
	if len(props) > 0 {
		out.ApplicationProperties = props
	}
	return out, nil
}

func clampInt32(v int64) int32 {
	switch {
	case v > math.MaxInt32:
		return math.MaxInt32
	case v < math.MinInt32:
		return math.MinInt32
	}
	return int32(v)
}

// Reconcile builds the delivery the runtime sees from a received message: the body as
// sent, Redeliveries = DeliveryCount − 1, the PartitionKey as the key, the attempts
// header, the schema version as typed ([SchemaVersion]) and the other string
// application properties as Headers. It never panics, whatever the message holds.
func Reconcile(queue string, rm *azservicebus.ReceivedMessage) *transport.Delivery {
	d := &transport.Delivery{Queue: queue}
	reconcile(d, rm)
	return d
}

// reconcile is [Reconcile] into d, which the kit allocated.
func reconcile(d *transport.Delivery, rm *azservicebus.ReceivedMessage) {
	d.Body = body(rm)
	if rm.DeliveryCount > 1 {
		d.Redeliveries = int(min(rm.DeliveryCount-1, math.MaxInt32))
	}
	if rm.PartitionKey != nil {
		d.Key = []byte(*rm.PartitionKey)
	}
	for k, v := range rm.ApplicationProperties {
		switch k {
		case PropSchemaVersion:
			d.SchemaVersion = SchemaVersion(v)
		case PropAttempts:
			d.AttemptsHeader, d.HasAttemptsHeader = driverkit.Attempts(v)
		case PropSourceLang, PropCreatedAt:
		default:
			if s, ok := v.(string); ok {
				driverkit.SetHeader(d, k, s)
			}
		}
	}
}

// body returns the payload: the SDK's Body, else the AMQP body sections'.
func body(rm *azservicebus.ReceivedMessage) []byte {
	switch {
	case rm.Body != nil:
		return rm.Body
	case rm.RawAMQPMessage == nil:
		return []byte{}
	}
	return driverkit.AMQPBody(rm.RawAMQPMessage.Body.Data, rm.RawAMQPMessage.Body.Value)
}

// SchemaVersion normalises the bq-schema-version property to what
// [transport.Delivery.SchemaVersion] holds ([driverkit.SchemaValue]): nil, a string (or
// symbol) as sent, an int64 for any integer, a float64, a bool; any other AMQP type as
// its kind and printed form ("binary:[49]"), which the gate rejects.
func SchemaVersion(v any) any { return driverkit.SchemaValue(v) }

// messageSize is what the size check counts: the body, the system properties the
// transport sets and every application property's name and value.
func messageSize(sm *azservicebus.Message) int {
	n := len(sm.Body)
	for _, p := range []*string{sm.ContentType, sm.Subject, sm.CorrelationID, sm.MessageID, sm.PartitionKey} {
		if p != nil {
			n += len(*p)
		}
	}
	if sm.ScheduledEnqueueTime != nil {
		n += 8
	}
	for k, v := range sm.ApplicationProperties {
		n += len(k)
		switch v := v.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		default:
			n += 8 // the numbers and booleans the binding writes
		}
	}
	return n
}
