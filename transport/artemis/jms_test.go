package artemis_test

import (
	"context"
	"encoding/xml"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// artemisCLI finds bin/artemis of the Artemis distribution scripts/brokers.sh unpacked:
// $BQ_ARTEMIS_HOME, else ${BQ_CACHE_DIR:-~/.cache/babelqueue}/apache-artemis-*. Missing,
// it fails the test under CI=true and skips it elsewhere.
func artemisCLI(t *testing.T) string {
	t.Helper()
	var candidates []string
	if h := os.Getenv("BQ_ARTEMIS_HOME"); h != "" {
		candidates = append(candidates, filepath.Join(h, "bin", "artemis"))
	}
	cache := os.Getenv("BQ_CACHE_DIR")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache", "babelqueue")
		}
	}
	if matches, _ := filepath.Glob(filepath.Join(cache, "apache-artemis-*", "bin", "artemis")); len(matches) > 0 {
		candidates = append(candidates, matches...)
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c
		}
	}
	msg := "the Artemis CLI (bin/artemis) was not found: run scripts/brokers.sh up artemis or set BQ_ARTEMIS_HOME"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: never skipped)")
	}
	t.Skip(msg)
	return ""
}

// exported is the XML the Artemis CLI consumer writes with --data: each message as the
// JMS client received it.
type exported struct {
	Messages []struct {
		Type       string `xml:"type,attr"`
		Timestamp  int64  `xml:"timestamp,attr"`
		Properties []struct {
			Name  string `xml:"name,attr"`
			Value string `xml:"value,attr"`
			Type  string `xml:"type,attr"`
		} `xml:"properties>property"`
		Body string `xml:"body"`
	} `xml:"message"`
}

// A JMS consumer (the Artemis CLI, a core JMS client) reads what Go produced: a
// TextMessage holding the envelope, JMSType = the URN, JMSCorrelationID = trace_id,
// JMSTimestamp = created_at and the bq_ properties as strings.
func TestJMSPeerReadsGo(t *testing.T) {
	cli := artemisCLI(t)
	raw := brokerURL(t)
	core := os.Getenv("BQ_ARTEMIS_CORE_URL")
	if core == "" {
		u, _ := url.Parse(raw)
		core = "tcp://" + u.Hostname() + ":61616"
	}
	u, _ := url.Parse(raw)
	user := u.User.Username()
	pass, _ := u.User.Password()

	tr := openTransport(t)
	q := transporttest.UniqueName("bqtest-jms")
	body := []byte(`{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042,"note":"café"},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"go","schema_version":1,"created_at":1749132727000},"attempts":1}`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := tr.Publish(ctx, &transport.Message{
		Queue: q, Body: body, Attempts: 1,
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		Projection: transport.Projection{
			URN: "urn:babel:orders:created", TraceID: "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
			MessageID: "f1e2d3c4-b5a6-4789-90ab-cdef01234567", Lang: "go", SchemaVersion: 1, CreatedAt: 1749132727000,
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "jms.xml")
	args := []string{"consumer", "--silent", "--url", core, "--destination", "queue://" + q,
		"--message-count", "1", "--receive-timeout", "20000", "--data", out}
	if user != "" {
		args = append(args, "--user", user, "--password", pass)
	}
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.Stdin = strings.NewReader("")
	if outb, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("artemis consumer: %v\n%s", err, strings.ReplaceAll(string(outb), pass, "xxxxx"))
	}
	xb, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var x exported
	if err := xml.Unmarshal(xb, &x); err != nil {
		t.Fatalf("%v\n%s", err, xb)
	}
	if len(x.Messages) != 1 {
		t.Fatalf("the JMS consumer got %d messages, want 1:\n%s", len(x.Messages), xb)
	}
	m := x.Messages[0]
	props := map[string]string{}
	for _, p := range m.Properties {
		props[p.Name] = p.Value
	}
	t.Logf("JMS view: type=%s JMSType=%q JMSCorrelationID=%q JMSTimestamp=%d", m.Type, props["JMSType"], props["JMSCorrelationID"], m.Timestamp)
	if m.Type != "text" {
		t.Errorf("JMS message type = %q, want text (a TextMessage)", m.Type)
	}
	if strings.TrimSpace(m.Body) != string(body) {
		t.Errorf("JMS body = %q, want the envelope %q", m.Body, body)
	}
	want := map[string]string{
		"JMSType":           "urn:babel:orders:created",
		"JMSCorrelationID":  "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
		"bq_schema_version": "1", "bq_source_lang": "go", "bq_attempts": "1", "bq_app_id": "babelqueue",
		"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		// the manifest's annotation, as Artemis hands it to a JMS client
		"JMS_AMQP_MA_x-opt-jms-type": "urn:babel:orders:created",
		// routed to an anycast queue (Artemis RoutingType ANYCAST = 1)
		"_AMQ_ROUTING_TYPE": "1",
	}
	for k, v := range want {
		if props[k] != v {
			t.Errorf("JMS property %s = %q, want %q", k, props[k], v)
		}
	}
	if m.Timestamp != 1749132727000 {
		t.Errorf("JMSTimestamp = %d, want created_at 1749132727000", m.Timestamp)
	}
	if !strings.HasSuffix(props["NATIVE_MESSAGE_ID"], "f1e2d3c4-b5a6-4789-90ab-cdef01234567") {
		t.Errorf("JMS message id %q does not carry meta.id", props["NATIVE_MESSAGE_ID"])
	}
}
