package pgstore_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/pyinterop"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// pyMessage is what the Python peers print per message they read.
type pyMessage struct {
	Body    string            `json:"body"`
	Key     *string           `json:"key"` // hex; Kafka only
	Headers map[string]string `json:"headers"`
}

// The Python SDK 1.24.0 reads what the relay published: the body byte for byte, the
// headers (Redis, RabbitMQ) and the key (Kafka: none, empty and binary apart).
func TestPythonReadsRelayed(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		pyinterop.Python(t)
		f := newFixture(t, tg)
		ctx := ctxT(t)
		headers := map[string]string{"traceparent": traceparent, "tracestate": "congo=t61rcWkgMzE"}
		keys := [][]byte{nil, {}, []byte("order-1042"), {0x00, 0xff, 'k'}}
		tx, err := f.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]byte{} // meta.id -> key
		for i, k := range keys {
			id, err := f.w.Write(ctx, tx, "urn:babel:outbox:interop", map[string]any{"n": i, "s": "Café ☕"},
				babelqueue.WithKey(k), babelqueue.WithHeaders(headers))
			if err != nil {
				t.Fatal(err)
			}
			want[id] = k
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		stored := map[string]string{}
		rows, err := f.db.QueryContext(ctx, "SELECT message_id, body FROM "+f.store.Table())
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			var body []byte
			if err := rows.Scan(&id, &body); err != nil {
				t.Fatal(err)
			}
			stored[id] = string(body)
		}
		rows.Close()
		if res, err := f.relay(t, tg.open(t, nil)).Drain(ctx); err != nil || res.Published != len(keys) {
			t.Fatalf("Drain: %+v, %v", res, err)
		}

		var out []byte
		switch tg.name {
		case "redis":
			out = pyinterop.Run(t, 90*time.Second, nil, pyinterop.Script(t, "redis_peer.py"), "consume", tg.url(t), f.queue, "4")
		case "rabbitmq":
			out = pyinterop.Run(t, 90*time.Second, nil, pyinterop.Script(t, "amqp_peer.py"), "drain", tg.url(t), f.queue)
		case "kafka":
			out = pyinterop.Run(t, 2*time.Minute, nil, pyinterop.Script(t, "kafka_peer.py"), "drain", tg.url(t), f.queue, transporttest.UniqueName("bqtest-py"), "4")
		}
		var got []pyMessage
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m pyMessage
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("python printed %q: %v", sc.Text(), err)
			}
			got = append(got, m)
		}
		if len(got) != len(keys) {
			t.Fatalf("python read %d messages, want %d:\n%s", len(got), len(keys), out)
		}
		for _, m := range got {
			env, err := envelope.Decode([]byte(m.Body))
			if err != nil {
				t.Fatalf("python read a body that is not an envelope: %v", err)
			}
			id := env.Meta.ID
			if m.Body != stored[id] {
				t.Errorf("%s: python read body\n %q\nthe outbox stored\n %q", id, m.Body, stored[id])
			}
			// Python 1.24.0's Kafka transport hands a consumer no out-of-band headers
			// (its ReceivedMessage carries none); on Kafka they are checked on the wire
			// by TestKeyAndHeadersByteForByte.
			for k, v := range headers {
				if tg.name != "kafka" && m.Headers[k] != v {
					t.Errorf("%s: python read header %s = %q, want %q", id, k, m.Headers[k], v)
				}
			}
			if tg.keys {
				k, ok := want[id]
				switch {
				case !ok:
					t.Errorf("python read %s, which was never written", id)
				case k == nil && m.Key != nil:
					t.Errorf("%s: python read key %q for a message without a key", id, *m.Key)
				case k != nil && (m.Key == nil || *m.Key != hex.EncodeToString(k)):
					t.Errorf("%s: python read key %v, want %x", id, m.Key, k)
				}
			}
		}
	})
}
