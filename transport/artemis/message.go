package artemis

import (
	"math"
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

// propDuplicateID is Artemis's duplicate-detection property (_AMQ_DUPL_ID). Publish and
// settle writes that wait for their outcome carry one value per write (confirm.go), so
// that a write sent again after its link dropped while the outcome was on its way is
// dropped by Artemis when the first copy was stored. It is the transport's own: never
// taken from a message's headers (a redriven or retried message would carry its first
// publish's value and be dropped as a duplicate of it) and never handed to a handler.
const propDuplicateID = "_AMQ_DUPL_ID"

// capabilityQueue makes Artemis treat an attached address as an anycast queue.
const capabilityQueue = "queue"

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
		switch k {
		case PropSchemaVersion, PropSourceLang, PropAttempts, PropAppID, propDuplicateID: // never replaced
		default:
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
	if m.Delay > 0 { // rounded up to a whole millisecond
		msg.Annotations[AnnotationDeliveryDelay] = m.Delay.Milliseconds() + int64(min(m.Delay%time.Millisecond, 1))
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
// sends: the body is [driverkit.AMQPBody] (a body in a section that holds no envelope
// bytes is empty, which the runtime treats as poison), and headers of unexpected types
// are left out.
func decode(msg *amqp.Message, d *transport.Delivery) {
	d.Body = driverkit.AMQPBody(msg.Data, msg.Value)
	if msg.Header != nil {
		d.Redeliveries = int(min(msg.Header.DeliveryCount, math.MaxInt32))
	}
	for k, v := range msg.ApplicationProperties {
		switch k {
		case PropAttempts:
			d.AttemptsHeader, d.HasAttemptsHeader = driverkit.Attempts(v)
		case PropSchemaVersion:
			d.SchemaVersion = driverkit.SchemaValue(v) // the kit's one reading of an AMQP value
		case PropSourceLang, PropAppID, propDuplicateID:
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
