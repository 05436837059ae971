package artemis

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"
	"unicode/utf8"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Names of the binding (SPEC §7, manifest block "artemis").
const (
	// AnnotationJMSType is the message annotation that carries the URN; a JMS peer reads
	// it as JMSType.
	AnnotationJMSType = "x-opt-jms-type"
	// AnnotationDeliveryDelay is the Artemis scheduled-delivery annotation (milliseconds).
	AnnotationDeliveryDelay = "x-opt-delivery-delay"
	// AnnotationJMSDest tells a JMS peer the destination is a queue (0).
	AnnotationJMSDest = "x-opt-jms-dest"

	// PropSchemaVersion is the schema-version application property.
	PropSchemaVersion = "bq_schema_version"
	// PropSourceLang is the producing SDK's language.
	PropSourceLang = "bq_source_lang"
	// PropAttempts is the attempts header.
	PropAttempts = "bq_attempts"
	// PropAppID is always "babelqueue".
	PropAppID = "bq_app_id"

	// AppID is the value of [PropAppID].
	AppID = "babelqueue"
)

// capabilityQueue makes Artemis treat an attached address as an anycast queue.
const capabilityQueue = "queue"

func reserved(name string) bool {
	switch name {
	case PropSchemaVersion, PropSourceLang, PropAttempts, PropAppID:
		return true
	}
	return false
}

// toAMQP projects m onto an AMQP message. The body is carried unchanged: as an AMQP
// string value section when it is valid UTF-8 (every envelope is), else as one data
// section.
func toAMQP(m *transport.Message) *amqp.Message {
	p := m.Projection
	msg := &amqp.Message{
		Header:                &amqp.MessageHeader{Durable: true},
		Annotations:           amqp.Annotations{AnnotationJMSDest: int8(0)},
		Properties:            &amqp.MessageProperties{},
		ApplicationProperties: make(map[string]any, 4+len(m.Headers)),
	}
	if utf8.Valid(m.Body) {
		// The text section every peer of the family reads: the Python SDK sends and
		// reads its body this way, and a JMS peer sees a TextMessage.
		msg.Value = string(m.Body)
	} else {
		// Bytes that are not UTF-8 cannot be an AMQP string; a data section keeps them
		// exactly (a JMS peer sees a BytesMessage).
		msg.Data = [][]byte{m.Body}
	}
	for k, v := range m.Headers {
		if !reserved(k) {
			msg.ApplicationProperties[k] = v
		}
	}
	if p.URN != "" {
		msg.Annotations[AnnotationJMSType] = p.URN
		// Artemis hands properties.subject to JMS consumers as JMSType (the annotation
		// reaches them only as the property JMS_AMQP_MA_x-opt-jms-type), so the URN
		// rides in both.
		msg.Properties.Subject = ptr(p.URN)
	}
	if p.TraceID != "" {
		msg.Properties.CorrelationID = p.TraceID
	}
	if p.MessageID != "" {
		msg.Properties.MessageID = p.MessageID
	}
	if p.CreatedAt != 0 {
		ts := time.UnixMilli(p.CreatedAt).UTC()
		msg.Properties.CreationTime = &ts
	}
	if p.SchemaVersion != 0 {
		msg.ApplicationProperties[PropSchemaVersion] = strconv.Itoa(p.SchemaVersion)
	}
	if p.Lang != "" {
		msg.ApplicationProperties[PropSourceLang] = p.Lang
	}
	msg.ApplicationProperties[PropAttempts] = strconv.Itoa(max(m.Attempts, 0))
	msg.ApplicationProperties[PropAppID] = AppID
	if m.Delay > 0 {
		msg.Annotations[AnnotationDeliveryDelay] = m.Delay.Milliseconds()
		if m.Delay%time.Millisecond != 0 {
			msg.Annotations[AnnotationDeliveryDelay] = m.Delay.Milliseconds() + 1
		}
	}
	return msg
}

func ptr[T any](v T) *T { return &v }

// fromAMQP decodes msg into a new delivery of queue (a browsed message's).
func fromAMQP(queue string, msg *amqp.Message) *transport.Delivery {
	d := &transport.Delivery{Queue: queue}
	decode(msg, d)
	return d
}

// decode reads a received AMQP message into d. It never panics on what the broker
// sends: a body in an unexpected section becomes the bytes that can be read, and
// headers of unexpected types are left out. bq_attempts is read with
// [driverkit.Attempts], the reading every driver shares.
func decode(msg *amqp.Message, d *transport.Delivery) {
	d.Body = bodyOf(msg)
	if msg.Header != nil {
		d.Redeliveries = int(min(msg.Header.DeliveryCount, math.MaxInt32))
	}
	for k, v := range msg.ApplicationProperties {
		switch k {
		case PropAttempts:
			d.AttemptsHeader, d.HasAttemptsHeader = driverkit.Attempts(v)
		case PropSchemaVersion:
			d.SchemaVersion = schemaValue(v)
		case PropSourceLang, PropAppID:
		default:
			if s, ok := v.(string); ok {
				if d.Headers == nil {
					d.Headers = map[string]string{}
				}
				d.Headers[k] = s
			}
		}
	}
}

// bodyOf returns the body bytes: the data sections joined (one in the usual case), or
// the bytes of a string or binary value section. Anything else (a sequence, a typed
// value) has no envelope bytes and yields an empty body, which the runtime treats as
// poison.
func bodyOf(msg *amqp.Message) []byte {
	switch {
	case len(msg.Data) == 1:
		return msg.Data[0]
	case len(msg.Data) > 1:
		var n int
		for _, b := range msg.Data {
			n += len(b)
		}
		out := make([]byte, 0, n)
		for _, b := range msg.Data {
			out = append(out, b...)
		}
		return out
	}
	switch v := msg.Value.(type) {
	case string:
		return []byte(v)
	case []byte:
		return v
	}
	return []byte{}
}

// schemaValue is bq_schema_version as the broker typed it, in the forms
// [transport.Delivery.SchemaVersion] allows: nil, string, int64, float64 or bool. A value
// of another AMQP type is reported as a string naming its type, which the gate rejects.
func schemaValue(v any) any {
	switch s := v.(type) {
	case nil:
		return nil
	case string, bool, float64:
		return s
	case float32:
		return float64(s)
	case int8, int16, int32, int64, int:
		return reflect.ValueOf(s).Int()
	case uint8, uint16, uint32, uint64, uint:
		if u := reflect.ValueOf(s).Uint(); u <= math.MaxInt64 {
			return int64(u)
		}
		return fmt.Sprint(s)
	case amqp.Null:
		return nil
	}
	return fmt.Sprintf("(%T)", v)
}
