package settle_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
)

// TestReconcileNegativeAgainstPython reads a body that says attempts -1 the way each
// binding with its own count does, in Go ([settle.ReconcileAttempts]) and in the Python
// SDK 1.24.0 (each transport's reconciliation of the received body), and checks both
// against the table. Where they differ the row says why; envelope/PARITY.md records it.
func TestReconcileNegativeAgainstPython(t *testing.T) {
	const body = `{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"schema_version":1},"attempts":-1}`
	const whyFirst = "the seed's rule is max(body.attempts, native count); on a first delivery the native count is 0, so Go reads 0. " +
		"Python's SQS, Service Bus and Artemis transports leave the body untouched until the broker has redelivered (its Pulsar transport applies the max, as Go)"
	minus := "-1"
	cases := []struct {
		name    string
		binding string
		rule    transport.AttemptsRule
		native  int     // the broker's count as it reports it
		redeliv int     // the same count as transport.Delivery.Redeliveries holds it
		header  *string // bq-attempts, as sent
		goN     int
		pyN     int
		why     string
	}{
		{"sqs first delivery", "sqs", transport.AttemptsMaxNative, 1, 0, nil, 0, -1, whyFirst},
		{"sqs third delivery", "sqs", transport.AttemptsMaxNative, 3, 2, nil, 2, 2, ""},
		{"service bus first delivery", "servicebus", transport.AttemptsMaxNative, 1, 0, nil, 0, -1, whyFirst},
		{"service bus second delivery", "servicebus", transport.AttemptsMaxNative, 2, 1, nil, 1, 1, ""},
		{"artemis first delivery", "artemis", transport.AttemptsMaxNative, 0, 0, nil, 0, -1, whyFirst},
		{"artemis redelivered", "artemis", transport.AttemptsMaxNative, 1, 1, nil, 1, 1, ""},
		{"pulsar first delivery, bq-attempts -1 (no valid property)", "pulsar", transport.AttemptsMaxNative, 0, 0, &minus, 0, 0, ""},
		{"kafka bq-attempts -1 (authoritative)", "kafka", transport.AttemptsHeaderAuthoritative, 0, 0, &minus, -1, -1, ""},
		{"kafka no header: the body's -1", "kafka", transport.AttemptsHeaderAuthoritative, 0, 0, nil, -1, -1, ""},
	}
	var in bytes.Buffer
	for _, c := range cases {
		line, _ := json.Marshal(map[string]any{"name": c.name, "binding": c.binding, "body": body, "native": c.native, "header": c.header})
		in.Write(append(line, '\n'))
	}
	out := pyinterop.Run(t, time.Minute, in.Bytes(), pyinterop.Script(t, "attempts_reconcile.py"))
	py := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct {
			Name     string
			Attempts int
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("python printed %q: %v", sc.Text(), err)
		}
		py[r.Name] = r.Attempts
	}
	for _, c := range cases {
		pyN, ok := py[c.name]
		if !ok {
			t.Fatalf("%s: python printed no answer", c.name)
		}
		d := transport.Delivery{Redeliveries: c.redeliv}
		if c.header != nil && c.binding == "kafka" {
			d.AttemptsHeader, d.HasAttemptsHeader = -1, true // the Kafka binding reads a signed header
		}
		if got := settle.ReconcileAttempts(c.rule, -1, true, &d); got != c.goN {
			t.Errorf("%s: Go reads %d, want %d", c.name, got, c.goN)
		}
		if pyN != c.pyN {
			t.Errorf("%s: Python 1.24.0 reads %d, the table says %d (update it and envelope/PARITY.md)", c.name, pyN, c.pyN)
		}
		if (c.goN != c.pyN) != (c.why != "") {
			t.Errorf("%s: a difference between the SDKs must say why, and only a difference", c.name)
		}
	}
}
