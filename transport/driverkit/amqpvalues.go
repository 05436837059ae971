package driverkit

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"
)

// AMQPBody is the payload of an AMQP 1.0 message (Service Bus, Artemis) from its body
// sections: every Data section joined (the one section of the usual case as it is, not
// copied), else an AmqpValue that is a string or binary, else an empty body (never nil),
// which the runtime treats as poison.
func AMQPBody(data [][]byte, value any) []byte {
	if len(data) == 1 && data[0] != nil {
		return data[0]
	}
	if len(data) > 0 {
		out := []byte{}
		for _, s := range data {
			out = append(out, s...)
		}
		return out
	}
	switch v := value.(type) {
	case string:
		return []byte(v)
	case []byte:
		return v
	}
	return []byte{}
}

// SchemaValue is a schema-version header as its broker typed it (an AMQP application
// property), in the forms [transport.Delivery.SchemaVersion] holds: nil; a string (or a
// named string type: an AMQP symbol) as sent; an int64 for an integer of any width (an
// unsigned one above the int64 range, which cannot be 1, as its decimal text); a
// float64; a bool. Any other type is its kind and printed form ("binary:[49]",
// "timestamp:…"), text that is never "1", so the schema gate rejects it naming it.
func SchemaValue(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case string, int64, float64, bool:
		return x
	case int8, int16, int32, int:
		return reflect.ValueOf(x).Int()
	case uint8, uint16, uint32, uint64, uint:
		if u := reflect.ValueOf(x).Uint(); u <= math.MaxInt64 {
			return int64(u)
		}
		return strconv.FormatUint(reflect.ValueOf(x).Uint(), 10)
	case float32:
		return float64(x)
	case []byte:
		return "binary:" + fmt.Sprint(x)
	case time.Time:
		return "timestamp:" + x.UTC().Format(time.RFC3339Nano)
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.String {
		return rv.String()
	}
	return fmt.Sprintf("%T:%v", v, v)
}
