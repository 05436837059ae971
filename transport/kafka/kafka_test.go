package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/settle"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/kafka"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// brokerURL is the Kafka under test; it fails under CI=true when Kafka is not running.
func brokerURL(t testing.TB) string {
	t.Helper()
	return transporttest.BrokerURL(t, "BQ_KAFKA_URL", "kafka")
}

// withParams adds query parameters to the broker URL.
func withParams(t testing.TB, raw string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// openKafka opens a transport on the test broker with its own consumer group, so tests
// never share group state. It is closed when the test ends.
func openKafka(t testing.TB, kv ...string) *kafka.Transport {
	t.Helper()
	raw := withParams(t, brokerURL(t), append([]string{"group", transporttest.UniqueName("bqtest-group")}, kv...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The kit opens consumers of several queues on one transport, so in one consumer
	// group (as the default group "babelqueue" of every SDK is): a member's join can
	// make the group leader revoke and re-assign another member's partition once, which
	// heals at the leader's next metadata refresh. Refresh every 2 s, not 10 s, so that
	// takes seconds here.
	tr, err := kafka.Open(ctx, raw, kafka.WithMetadataRefresh(2*time.Second))
	if err != nil {
		t.Fatalf("kafka.Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = tr.Close(ctx)
	})
	return tr
}

// newTopic returns a topic name no other test uses and, when the test ends, deletes that
// topic and the topics the transport derived from it (its dead-letter topic, its delay
// tiers): a broker that keeps the topics of every run grows without end and, restarted,
// loads them all before it answers.
func newTopic(t testing.TB, prefix string) string {
	q := transporttest.UniqueName(prefix)
	t.Cleanup(func() { deleteTopics(t, q) })
	return q
}

// deleteTopics deletes topic q and every topic named q.<suffix>. A failure is logged, not
// fatal: the test's verdict is already in.
func deleteTopics(t testing.TB, q string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds(t)...))
	if err != nil {
		t.Logf("delete topics %s: %v", q, err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx)
	if err != nil {
		t.Logf("delete topics %s: %v", q, err)
		return
	}
	var names []string
	for _, name := range td.Names() {
		if name == q || strings.HasPrefix(name, q+".") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	resp, err := adm.DeleteTopics(ctx, names...)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Logf("delete topics %v: %v", names, err)
	}
}

// seeds returns the broker addresses of the test URL.
func seeds(t testing.TB) []string {
	u, err := url.Parse(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(u.Host, ",")
}

// rawClient is a plain franz-go client on the test broker.
func rawClient(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds(t)...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// createTopic creates topic with the given partitions.
func createTopic(t testing.TB, topic string, partitions int32) {
	t.Helper()
	adm := kadm.NewClient(rawClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if resp.Err != nil {
		t.Fatalf("create topic %s: %v", topic, resp.Err)
	}
}

// topicExists asks the broker whether topic exists, without creating it.
func topicExists(t testing.TB, topic string) bool {
	t.Helper()
	adm := kadm.NewClient(rawClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	d, ok := td[topic]
	return ok && d.Err == nil
}

// readTopic reads n records of topic from the start, outside any group, and fails when
// fewer arrive within 30s.
func readTopic(t testing.TB, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := rawClient(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: got %d of %d records", topic, len(out), n)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// countTopic reads topic from the start for quiet and returns how many records it holds.
func countTopic(t testing.TB, topic string, quiet time.Duration) int {
	t.Helper()
	cl := rawClient(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), quiet)
	defer cancel()
	n := 0
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(*kgo.Record) { n++ })
	}
	return n
}

// produceRaw writes records with a plain client and waits for them.
func produceRaw(t testing.TB, recs ...*kgo.Record) {
	t.Helper()
	cl := rawClient(t, kgo.AllowAutoTopicCreation())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

func consumeOn(t testing.TB, tr transport.Transport, queue string, prefetch int) transport.Consumer {
	t.Helper()
	c, err := tr.Consume(context.Background(), queue, transport.ConsumeOptions{Prefetch: prefetch})
	if err != nil {
		t.Fatalf("Consume(%s): %v", queue, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func settleOK(t testing.TB, c transport.Consumer, d *transport.Delivery, s transport.Settlement) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Settle(ctx, d, s); err != nil {
		t.Fatalf("Settle(%s): %v", s.Outcome, err)
	}
}

// TestKit runs every group of the behavioural kit against the real Kafka, side by
// side (each case on topics of its own).
func TestKit(t *testing.T) {
	t.Parallel()
	brokerURL(t)
	transporttest.RunAll(t, transporttest.Harness{
		Config: transporttest.Config{
			Open:        func(t *testing.T) transport.Transport { return openKafka(t) },
			NewQueue:    func(t *testing.T) string { return newTopic(t, "bqtest") },
			QuietPeriod: 2 * time.Second,
			Explain:     explainTopic,
		},
		Parallel: true,
		// What the group has not committed is Ready, the end offsets add up to Appended.
		Stats: transporttest.StatsOptions{ReadyCountsInFlight: true, Wait: 20 * time.Second, Oldest: transporttest.OldestCreatedAt},
		Adjust: func(c transporttest.Case, cfg *transporttest.Config) {
			if c == transporttest.CaseStats {
				cfg.Prefetch = 1 // exact in-flight counts
			}
		},
		// Both transports are members of one consumer group, so the direct one reads what
		// the pipelined one left uncommitted.
		OpenPipelined: func(t *testing.T) (transport.Transport, transport.Transport) {
			group := transporttest.UniqueName("bqtest-pipelined")
			return openKafka(t, "group", group), openKafka(t, "group", group)
		},
		Without: map[transporttest.Case]string{
			transporttest.CaseSettleWriteFailure: "the case wants a refused settle write to leave no write behind, but a Kafka write " +
				"that timed out while the broker was unreachable stays in the producer's buffer and lands once it is back " +
				"(withdrawing it would fail the user's publishes buffered behind it; see TestTimedOutSettleWriteSparesPublishes); " +
				"TestOutageLosesNothing and TestMissingDeadLetterTopicLosesNothing cover failed settle writes instead",
			transporttest.CasePrefetchBound: "the case rewinds one of three deliveries and then acknowledges the other two, but a " +
				"Kafka rewind seeks the partition back, so the deliveries after the rewound one are superseded (their Settle is " +
				"a TakenBackError and frees their slot) and delivered again; the prefetch bound itself is the driver kit's, " +
				"tested in transport/driverkit",
			transporttest.CaseSizeLimit: "the limit is the topic's max.message.bytes, read from the broker; size_test.go checks " +
				"it on topics made with a small limit (TooLargeError before the send, settle writes refused whole)",
		},
	})
}

// TestKeysExact checks that a nil key stays a null key and an empty key stays an empty
// key, on the wire and on a settle write.
func TestKeysExact(t *testing.T) {
	t.Parallel()
	tr := openKafka(t)
	q, next := newTopic(t, "bqtest-keys"), newTopic(t, "bqtest-keys-next")
	keys := map[string][]byte{"nil": nil, "empty": {}, "some": []byte("order-1042")}
	for name, k := range keys {
		publishOK(t, tr, &transport.Message{Queue: q, Body: []byte(`{"name":"` + name + `"}`), Key: k})
	}
	// On the wire, as another client sees it.
	for _, r := range readTopic(t, q, len(keys)) {
		name := strings.TrimSuffix(strings.TrimPrefix(string(r.Value), `{"name":"`), `"}`)
		want := keys[name]
		if (r.Key == nil) != (want == nil) || !bytes.Equal(r.Key, want) {
			t.Errorf("%s key on the wire = %#v, want %#v", name, r.Key, want)
		}
	}
	// Through the transport, and through a settle write.
	c := consumeOn(t, tr, q, 8)
	for range keys {
		d := transporttest.Receive(t, c, 30*time.Second)
		w := &transport.Message{Queue: next, Body: d.Body, Key: d.Key}
		settleOK(t, c, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{w}})
	}
	for _, r := range readTopic(t, next, len(keys)) {
		name := strings.TrimSuffix(strings.TrimPrefix(string(r.Value), `{"name":"`), `"}`)
		want := keys[name]
		if (r.Key == nil) != (want == nil) || !bytes.Equal(r.Key, want) {
			t.Errorf("%s key after a settle write = %#v, want %#v", name, r.Key, want)
		}
	}
	c2 := consumeOn(t, tr, next, 8)
	for range keys {
		d := transporttest.Receive(t, c2, 30*time.Second)
		name := strings.TrimSuffix(strings.TrimPrefix(string(d.Body), `{"name":"`), `"}`)
		want := keys[name]
		if (d.Key == nil) != (want == nil) || !bytes.Equal(d.Key, want) {
			t.Errorf("%s Delivery.Key = %#v, want %#v", name, d.Key, want)
		}
		settleOK(t, c2, d, transport.Settlement{Outcome: transport.Ack})
	}
}

func publishOK(t testing.TB, tr transport.Transport, m *transport.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Publish(ctx, m); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// TestDeliveryHeaders checks what a consumer reports of the binding's headers: the schema
// version as sent (nil when missing or null), the attempts header (first wins; unreadable
// means absent), and out-of-band headers without the binding's own.
func TestDeliveryHeaders(t *testing.T) {
	t.Parallel()
	tr := openKafka(t)
	q := newTopic(t, "bqtest-hdr")
	h := func(kv ...string) []kgo.RecordHeader {
		var out []kgo.RecordHeader
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return out
	}
	type want struct {
		schema     any
		attempts   int
		hasAttempt bool
		headers    map[string]string
	}
	cases := map[string]struct {
		hs   []kgo.RecordHeader
		want want
	}{
		"none":         {nil, want{nil, 0, false, nil}},
		"two":          {h("bq-schema-version", "2", "bq-attempts", "4"), want{"2", 4, true, nil}},
		"space-one":    {h("bq-schema-version", " 1"), want{" 1", 0, false, nil}},
		"null-schema":  {[]kgo.RecordHeader{{Key: "bq-schema-version", Value: nil}}, want{nil, 0, false, nil}},
		"first-wins":   {h("bq-attempts", "2", "bq-attempts", "7", "bq-schema-version", "1", "bq-schema-version", "9"), want{"1", 2, true, nil}},
		"bad-attempts": {[]kgo.RecordHeader{{Key: "bq-attempts", Value: []byte{0xff, '1'}}}, want{nil, 0, false, nil}},
		"padded":       {h("bq-attempts", " 3\n"), want{nil, 3, true, nil}},
		"user":         {h("bq-job", "urn:x", "traceparent", "00-abc", "x-tenant", "acme", "bq-due-at", "1"), want{nil, 0, false, map[string]string{"traceparent": "00-abc", "x-tenant": "acme"}}},
	}
	var recs []*kgo.Record
	for name, c := range cases {
		recs = append(recs, &kgo.Record{Topic: q, Value: []byte(name), Headers: c.hs})
	}
	produceRaw(t, recs...)
	c := consumeOn(t, tr, q, 16)
	for range cases {
		d := transporttest.Receive(t, c, 30*time.Second)
		name := string(d.Body)
		w := cases[name].want
		if d.SchemaVersion != w.schema {
			t.Errorf("%s: SchemaVersion = %#v, want %#v", name, d.SchemaVersion, w.schema)
		}
		if d.HasAttemptsHeader != w.hasAttempt || d.AttemptsHeader != w.attempts {
			t.Errorf("%s: attempts header = %d (present %v), want %d (present %v)", name, d.AttemptsHeader, d.HasAttemptsHeader, w.attempts, w.hasAttempt)
		}
		if len(d.Headers) != len(w.headers) {
			t.Errorf("%s: Headers = %v, want %v", name, d.Headers, w.headers)
		}
		for k, v := range w.headers {
			if d.Headers[k] != v {
				t.Errorf("%s: header %s = %q, want %q", name, k, d.Headers[k], v)
			}
		}
		settleOK(t, c, d, transport.Settlement{Outcome: transport.Ack})
	}
}

// TestMissingDeadLetterTopicLosesNothing: a settle write (not pipelined) to a topic that does not exist, with topic
// auto-creation off, fails with a typed delivery error within the delivery timeout and
// commits nothing; once the topic exists the same record is settled, and the dead letter
// is written once with the record's key.
func TestMissingDeadLetterTopicLosesNothing(t *testing.T) {
	t.Parallel()
	tr := openKafka(t, "auto_create_topics", "false", "delivery_timeout", "3s", "pipeline_settles", "0")
	q := newTopic(t, "bqtest-nodlq")
	dlq := q + ".dlq"
	createTopic(t, q, 1)
	publishOK(t, tr, &transport.Message{Queue: q, Body: []byte(`{"job":"urn:babel:t:dlq"}`), Key: []byte("k-1")})
	c := consumeOn(t, tr, q, 1)
	d := transporttest.Receive(t, c, 30*time.Second)
	dl := func(d *transport.Delivery) transport.Settlement {
		return transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{{Queue: dlq, Body: append(d.Body[:len(d.Body):len(d.Body)], ' '), Key: d.Key}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.Settle(ctx, d, dl(d))
	var swe *transport.SettleWriteError
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.As(err, &swe) || swe.Queue != dlq {
		t.Fatalf("settle write to a missing topic: got %v, want a SettleWriteError for %q", err, dlq)
	}
	var de *kafka.DeliveryError
	if !errors.Is(err, kafka.ErrDelivery) || !errors.As(err, &de) || de.Topic != dlq {
		t.Fatalf("settle write to a missing topic: got %v, want a DeliveryError for %q", err, dlq)
	}
	if topicExists(t, dlq) {
		t.Fatalf("the transport created %s although auto_create_topics=false", dlq)
	}
	settleOK(t, c, d, transport.Settlement{Outcome: transport.Rewind})
	createTopic(t, dlq, 1)
	settled := false
	for attempt := 0; attempt < 10 && !settled; attempt++ {
		d = transporttest.Receive(t, c, 30*time.Second)
		if string(d.Key) != "k-1" {
			t.Fatalf("redelivered record has key %q", d.Key)
		}
		err := c.Settle(ctx, d, dl(d))
		switch {
		case err == nil:
			settled = true
		case errors.Is(err, transport.ErrSettleWrite):
			settleOK(t, c, d, transport.Settlement{Outcome: transport.Rewind})
		default:
			t.Fatalf("Settle: %v", err)
		}
	}
	if !settled {
		t.Fatal("the record was never settled after the dead-letter topic was created")
	}
	recs := readTopic(t, dlq, 1)
	if string(recs[0].Key) != "k-1" {
		t.Errorf("dead letter key = %q, want k-1", recs[0].Key)
	}
	if n := countTopic(t, dlq, 2*time.Second); n != 1 {
		t.Errorf("dead-letter topic holds %d records, want 1", n)
	}
	transporttest.ExpectNothing(t, c, 2*time.Second)
	// Committed: a new member of the group has nothing to do.
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer closeCancel()
	if err := c.Close(closeCtx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c2 := consumeOn(t, tr, q, 1)
	transporttest.ExpectNothing(t, c2, 5*time.Second)
}

func TestCapabilities(t *testing.T) {
	tr, err := kafka.New(kgoClientNoBroker(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := tr.Capabilities()
	if c.Attempts != transport.AttemptsHeaderAuthoritative || !c.Delay || !c.PoisonNeedsRetryTiers || !c.SchemaGate || c.DeadLetterSuffix != ".dlq" || c.HandOff {
		t.Errorf("capabilities = %+v", c)
	}
	if tr.Group() != "babelqueue" || tr.DeliveryTimeout() != 30*time.Second {
		t.Errorf("defaults: group %q, delivery timeout %s; want babelqueue, 30s", tr.Group(), tr.DeliveryTimeout())
	}
	if got := settle.DeadLetterQueue("orders", "", "", c); got != "orders.dlq" {
		t.Errorf("DLQ of orders = %q", got)
	}
}

func kgoClientNoBroker(t testing.TB) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestDelayKeepsRecord: a delayed message comes back on its queue with its key, body and
// out-of-band headers, without the parking headers, and the parked record is committed.
func TestDelayKeepsRecord(t *testing.T) {
	t.Parallel()
	group := transporttest.UniqueName("bqtest-delay")
	tr := openKafka(t, "group", group)
	q := newTopic(t, "bqtest-delay")
	c := consumeOn(t, tr, q, 2)
	body := []byte(`{"job":"urn:babel:t:delay","x":1e400}`)
	publishOK(t, tr, &transport.Message{Queue: q, Body: body, Key: []byte{}, Attempts: 2, Headers: map[string]string{"x-tenant": "acme"}, Delay: 1500 * time.Millisecond})
	d := transporttest.Receive(t, c, 60*time.Second)
	if !bytes.Equal(d.Body, body) || d.Key == nil || len(d.Key) != 0 {
		t.Errorf("delayed record: body %q key %#v", d.Body, d.Key)
	}
	if len(d.Headers) != 1 || d.Headers["x-tenant"] != "acme" {
		t.Errorf("delayed record headers = %v, want only x-tenant", d.Headers)
	}
	if !d.HasAttemptsHeader || d.AttemptsHeader != 2 {
		t.Errorf("delayed record attempts header = %d (%v), want 2", d.AttemptsHeader, d.HasAttemptsHeader)
	}
	settleOK(t, c, d, transport.Settlement{Outcome: transport.Ack})
	r := readTopic(t, q, 1)[0]
	for _, h := range r.Headers {
		if h.Key == kafka.HeaderDueAt || h.Key == kafka.HeaderOriginalTopic {
			t.Errorf("parking header %s left on the re-injected record", h.Key)
		}
	}
	// Both the queue and its delay topic are committed: a new member gets nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c2 := consumeOn(t, tr, q, 2)
	transporttest.ExpectNothing(t, c2, 5*time.Second)
	if n := countTopic(t, q, 2*time.Second); n != 1 {
		t.Errorf("queue holds %d records after one delayed publish, want 1 (re-injected twice?)", n)
	}
}

// TestHostileRecords: a tombstone (null value), a header with a null value and a huge
// attempts value are handed over as data, never a panic.
func TestHostileRecords(t *testing.T) {
	t.Parallel()
	tr := openKafka(t)
	q := newTopic(t, "bqtest-hostile")
	produceRaw(t,
		&kgo.Record{Topic: q, Value: nil, Key: []byte("tomb")},
		&kgo.Record{Topic: q, Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: "x-null", Value: nil}, {Key: "", Value: []byte("v")}, {Key: "bq-attempts", Value: []byte("99999999999999999999")}}},
	)
	c := consumeOn(t, tr, q, 2)
	for range 2 {
		d := transporttest.Receive(t, c, 30*time.Second)
		switch string(d.Key) {
		case "tomb":
			if len(d.Body) != 0 {
				t.Errorf("tombstone body = %q", d.Body)
			}
		default:
			if !d.HasAttemptsHeader || d.AttemptsHeader <= 0 {
				t.Errorf("huge attempts header read as %d (%v), want a large positive count", d.AttemptsHeader, d.HasAttemptsHeader)
			}
			if v, ok := d.Headers["x-null"]; !ok || v != "" {
				t.Errorf("null-valued header = %q (%v)", v, ok)
			}
		}
		settleOK(t, c, d, transport.Settlement{Outcome: transport.Ack})
	}
}

// explainTopic says what the broker holds of topic, for a kit case that found it short:
// the transport's group (state, members, the partitions each was assigned) and the
// topic's end offsets.
func explainTopic(t *testing.T, tr transport.Transport, topic string) string {
	adm := kadm.NewClient(rawClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	if kt, ok := tr.(*kafka.Transport); ok {
		groups, err := adm.DescribeGroups(ctx, kt.Group())
		if err != nil {
			fmt.Fprintf(&b, "group %s: %v; ", kt.Group(), err)
		}
		for _, g := range groups.Sorted() {
			fmt.Fprintf(&b, "group %s %s, %d members:", g.Group, g.State, len(g.Members))
			for _, m := range g.Members {
				fmt.Fprintf(&b, " %s", m.MemberID)
				if as, ok := m.Assigned.AsConsumer(); ok {
					for _, a := range as.Topics {
						fmt.Fprintf(&b, " %s%v", a.Topic, a.Partitions)
					}
				}
			}
			b.WriteString("; ")
		}
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		fmt.Fprintf(&b, "end offsets: %v", err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		fmt.Fprintf(&b, "%s[%d] ends at %d (%v) ", o.Topic, o.Partition, o.Offset, o.Err)
	})
	return b.String()
}

// TestExplainTopic: the kit's view of a short topic names the group with its member and
// the partition it holds, and the topic's end offset.
func TestExplainTopic(t *testing.T) {
	t.Parallel()
	group := transporttest.UniqueName("bqtest-explain")
	tr := openKafka(t, "group", group)
	q := newTopic(t, "bqtest-explain")
	c := consumeOn(t, tr, q, 1)
	publishOK(t, tr, &transport.Message{Queue: q, Body: []byte(`{"job":"urn:babel:t:explain"}`)})
	settleOK(t, c, transporttest.Receive(t, c, 60*time.Second), transport.Settlement{Outcome: transport.Ack})
	got := explainTopic(t, tr, q)
	for _, want := range []string{"group " + group + " Stable, 1 members:", " " + q + "[0]", q + "[0] ends at 1 "} {
		if !strings.Contains(got, want) {
			t.Errorf("explainTopic = %q, want it to hold %q", got, want)
		}
	}
}
