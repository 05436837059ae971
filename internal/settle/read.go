package settle

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/babelqueue-go/babelqueue/transport"
)

// GateSchemaVersion applies the schema-version gate (docs/settlement.md) to the raw value of a
// delivery's bq-schema-version header. A missing (nil) value, or a string that is
// empty or only ASCII white space, passes. Otherwise only the string "1" passes, and,
// when acceptInteger is set (Service Bus), an integer 1. shown is the rejected value
// as it appears in the reserved route.
func GateSchemaVersion(v any, acceptInteger bool) (ok bool, shown string) {
	switch x := v.(type) {
	case nil:
		return true, ""
	case string:
		if x == "1" || asciiBlank(x) {
			return true, ""
		}
		return false, x
	case []byte:
		return GateSchemaVersion(string(x), acceptInteger)
	case int:
		return acceptInteger && x == 1, strconv.Itoa(x)
	case int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		n, _ := strconv.ParseInt(fmt.Sprint(x), 10, 64)
		return acceptInteger && n == 1, fmt.Sprint(x)
	case float32:
		return false, floatShown(float64(x), 32)
	case float64:
		return false, floatShown(x, 64)
	case bool:
		return false, strconv.FormatBool(x)
	default:
		return false, fmt.Sprint(x)
	}
}

func floatShown(f float64, bits int) string {
	s := strconv.FormatFloat(f, 'f', -1, bits)
	if !strings.ContainsAny(s, ".eEnN") {
		s += ".0"
	}
	return s
}

func asciiBlank(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\v', '\f', '\r':
		default:
			return false
		}
	}
	return true
}

// ReconcileAttempts applies rule to a delivery. bodyAttempts is the attempts member of
// the body, meaningful only when bodyKnown is true (the body decoded).
//
// A count read from a decoded body, or from the attempts header beside one, is taken
// as written, a negative one too (docs/settlement.md, "A negative attempts"): the
// SPEC's attempts ≥ 0 binds writers, and the Python SDK 1.24.0, the tie-breaker for
// what a reader does with a value it did not write, hands its handler the body's value
// and counts on from it. A native redelivery count only ever raises it. Without a
// decoded body (poison, a gate rejection) the count is never below 0, as in Python.
func ReconcileAttempts(rule transport.AttemptsRule, bodyAttempts int, bodyKnown bool, d *transport.Delivery) int {
	if !bodyKnown {
		n := 0
		if d.HasAttemptsHeader {
			n = d.AttemptsHeader
		}
		if rule == transport.AttemptsMaxNative {
			n = max(n, d.Redeliveries)
		}
		return max(n, 0)
	}
	if rule == transport.AttemptsHeaderAuthoritative && d.HasAttemptsHeader {
		return d.AttemptsHeader
	}
	n := bodyAttempts
	if rule == transport.AttemptsMaxNative && d.Redeliveries > n {
		n = d.Redeliveries
	}
	return n
}

// DeadLetterQueue names the dead-letter queue of queue: override when set, else queue
// plus suffix (or the capability's default suffix), the suffix going before the
// capability's FIFO suffix ("orders.fifo" with "-dlq" is "orders-dlq.fifo").
func DeadLetterQueue(queue, override, suffix string, c transport.Capabilities) string {
	if override != "" {
		return override
	}
	if suffix == "" {
		suffix = c.DeadLetterSuffix
	}
	if suffix == "" {
		suffix = ".dlq"
	}
	if c.FIFOSuffix != "" && len(queue) > len(c.FIFOSuffix) && queue[len(queue)-len(c.FIFOSuffix):] == c.FIFOSuffix {
		base := queue[:len(queue)-len(c.FIFOSuffix)]
		return base + suffix + c.FIFOSuffix
	}
	return queue + suffix
}
