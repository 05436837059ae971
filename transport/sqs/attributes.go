package sqs

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// The MessageAttributes of the binding.
const (
	AttrJob           = driverkit.PropJob           // String: the URN
	AttrTraceID       = driverkit.PropTraceID       // String: trace_id
	AttrMessageID     = driverkit.PropMessageID     // String: meta.id
	AttrSchemaVersion = driverkit.PropSchemaVersion // Number: meta.schema_version
	AttrSourceLang    = driverkit.PropSourceLang    // String: meta.lang
	AttrCreatedAt     = driverkit.PropCreatedAt     // Number: meta.created_at (Unix ms)
	AttrAttempts      = "bq-attempts"               // Number: Message.Attempts, when not zero
	AttrKey           = "bq-key"                    // Binary: the record key ("String.empty" for an empty key)
)

// MaxAttributes is the number of MessageAttributes SQS accepts on one message.
const MaxAttributes = 10

// emptyKeyType is the DataType of bq-key for a non-nil empty key: SQS attribute values
// cannot be empty, so the type carries the fact and the value is a placeholder.
const emptyKeyType = "String.empty"

var (
	// ErrTooManyAttributes is returned for a write whose projection, key and headers
	// need more than [MaxAttributes] MessageAttributes.
	ErrTooManyAttributes = errors.New("sqs: more than 10 message attributes")
	// ErrBadHeader matches a [HeaderError]: an out-of-band header SQS cannot carry.
	ErrBadHeader = errors.New("sqs: header cannot be sent as a message attribute")
	// ErrBodyNotText is returned for a body SQS cannot carry: not valid UTF-8, or
	// holding a character XML 1.0 forbids.
	ErrBodyNotText = errors.New("sqs: body is not text SQS can carry")
)

// HeaderError names an out-of-band header that cannot ride as a MessageAttribute.
type HeaderError struct {
	Name   string
	Reason string
}

// Error describes the header.
func (e *HeaderError) Error() string {
	return fmt.Sprintf("sqs: header %q cannot be sent as a message attribute: %s", e.Name, e.Reason)
}

// Is makes the error match [ErrBadHeader].
func (e *HeaderError) Is(target error) bool { return target == ErrBadHeader }

// projected are the attributes the projection owns; a header of the same name rides
// only when the projection leaves the field empty (a raw write).
var projected = map[string]bool{
	AttrJob: true, AttrTraceID: true, AttrMessageID: true,
	AttrSchemaVersion: true, AttrSourceLang: true, AttrCreatedAt: true,
}

func attr(typ, v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String(typ), StringValue: aws.String(v)}
}

// buildAttributes projects m onto MessageAttributes: the bq- attributes of the fields
// the projection knows, bq-attempts and bq-key when they carry something, the headers.
func buildAttributes(m *transport.Message) (map[string]types.MessageAttributeValue, error) {
	attrs := make(map[string]types.MessageAttributeValue, 8+len(m.Headers))
	driverkit.Project(m.Projection, func(name, text string, number bool, _ int64) {
		if number {
			attrs[name] = attr("Number", text)
		} else {
			attrs[name] = attr("String", text)
		}
	})
	if m.Attempts != 0 {
		attrs[AttrAttempts] = attr("Number", strconv.Itoa(m.Attempts))
	}
	if m.Key != nil {
		if len(m.Key) == 0 {
			attrs[AttrKey] = attr(emptyKeyType, "-")
		} else {
			attrs[AttrKey] = types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: append([]byte(nil), m.Key...)}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		v := m.Headers[k]
		if k == AttrAttempts || k == AttrKey {
			return nil, &HeaderError{Name: k, Reason: "the name is reserved by the SQS binding"}
		}
		if projected[k] {
			if _, set := attrs[k]; set {
				continue // the projection wins
			}
		}
		if reason := checkAttrName(k); reason != "" {
			return nil, &HeaderError{Name: k, Reason: reason}
		}
		if v == "" {
			return nil, &HeaderError{Name: k, Reason: "SQS does not accept an empty attribute value"}
		}
		if err := checkText(v); err != nil {
			return nil, &HeaderError{Name: k, Reason: "value " + err.Error()}
		}
		attrs[k] = attr("String", v)
	}
	if len(attrs) > MaxAttributes {
		used := strings.Join(slices.Sorted(maps.Keys(attrs)), ", ")
		return nil, fmt.Errorf("%w: the write to %q needs %d (%s); send fewer headers", ErrTooManyAttributes, m.Queue, len(attrs), used)
	}
	return attrs, nil
}

// attrNameChars are the characters of a MessageAttribute name.
var attrNameChars = regexp.MustCompile(`^[A-Za-z0-9_.-]*$`)

// checkAttrName returns why name cannot be a MessageAttribute name, or "".
func checkAttrName(name string) string {
	if name == "" {
		return "empty name"
	}
	if len(name) > 256 {
		return "longer than 256 characters"
	}
	if !attrNameChars.MatchString(name) {
		return "SQS attribute names allow only letters, digits, '_', '-' and '.'"
	}
	if name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") {
		return "a period may not start or end the name, nor follow another period"
	}
	l := strings.ToLower(name)
	if strings.HasPrefix(l, "aws.") || strings.HasPrefix(l, "amazon.") {
		return "names starting with AWS. or Amazon. are reserved by SQS"
	}
	return ""
}

// checkText checks s against the characters SQS allows: #x9 | #xA | #xD |
// #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF, in valid UTF-8.
func checkText(s string) error {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			return fmt.Errorf("is not valid UTF-8 at byte %d", i)
		}
		ok := r == 0x9 || r == 0xA || r == 0xD || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF
		if !ok {
			return fmt.Errorf("holds U+%04X at byte %d, which SQS does not allow", r, i)
		}
		i += size
	}
	return nil
}

// readDelivery fills the broker-given facts of a delivery from a received message.
// Nothing in msg can make it fail: a missing or garbage value reads as absent.
func readDelivery(d *transport.Delivery, msg *types.Message) {
	if msg.Body != nil {
		d.Body = []byte(*msg.Body)
	} else {
		d.Body = []byte{}
	}
	if n, err := strconv.Atoi(msg.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil && n > 1 {
		d.Redeliveries = n - 1
	}
	for name, a := range msg.MessageAttributes {
		typ := aws.ToString(a.DataType)
		switch {
		case name == AttrSchemaVersion:
			if a.StringValue != nil {
				d.SchemaVersion = *a.StringValue
			}
		case name == AttrAttempts:
			if a.StringValue != nil {
				d.AttemptsHeader, d.HasAttemptsHeader = driverkit.ParseAttempts(*a.StringValue)
			}
		case name == AttrKey:
			switch {
			case typ == emptyKeyType:
				d.Key = []byte{}
			case strings.HasPrefix(typ, "Binary"):
				d.Key = append([]byte{}, a.BinaryValue...)
			case a.StringValue != nil:
				d.Key = []byte(*a.StringValue)
			}
		case projected[name]:
		case a.StringValue != nil && !strings.HasPrefix(typ, "Binary"):
			driverkit.SetHeader(d, name, *a.StringValue)
		}
	}
}
