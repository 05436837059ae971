package pulsar_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// topicMaxMessageSize sets (or, with an empty size, removes) the maxMessageSize topic
// policy of persistent://public/default/<topic> through the admin REST API.
func topicMaxMessageSize(t *testing.T, topic, size string) {
	t.Helper()
	u, err := url.Parse(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	method := http.MethodPost
	if size == "" {
		method = http.MethodDelete
	}
	endpoint := "http://" + u.Hostname() + ":8080/admin/v2/persistent/public/default/" + topic + "/maxMessageSize"
	req, err := http.NewRequest(method, endpoint, strings.NewReader(size))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s: %s", method, endpoint, resp.Status, b)
	}
}

// After the broker refused a write (NotAllowedError: the topic's maxMessageSize policy),
// writes to the topic work again once the refusal ends: the transport replaces the
// producer whose write failed. pulsar-client-go detaches a producer on NotAllowedError,
// so without that every later write through it timed out although the broker stored it
// (found by the fault suite, issue 16, with a dead-letter topic refusing dead letters).
func TestWritesRecoverAfterABrokerRefusal(t *testing.T) {
	tr := openTransport(t, "send_timeout=3s")
	q := transporttest.UniqueName("bqtest-refused")
	ctx := context.Background()
	msg := func(n int) *transport.Message {
		return &transport.Message{Queue: q, Body: fmt.Appendf(nil, `{"n":%d,"pad":"%s"}`, n, strings.Repeat("x", 200))}
	}
	if err := tr.Publish(ctx, msg(0)); err != nil {
		t.Fatal(err)
	}
	topicMaxMessageSize(t, q, "64")
	// Topic policies reach the broker asynchronously: write until one is refused.
	refused := false
	for i := 1; i <= 20 && !refused; i++ {
		refused = tr.Publish(ctx, msg(i)) != nil
		if !refused {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if !refused {
		t.Fatal("the broker never refused a write over the topic's maxMessageSize")
	}
	topicMaxMessageSize(t, q, "")
	var err error
	for range 10 { // the policy's removal reaches the broker asynchronously too
		if err = tr.Publish(ctx, msg(100)); err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("writes still fail after the refusal ended: %v", err)
	}
}
