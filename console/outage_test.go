package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/console"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/internal/faultproxy"
	"github.com/babelqueue-go/babelqueue/transport"
)

// TestSurvivesBrokerOutage takes Redis away from the console (a loopback proxy that
// cuts its connections) and brings it back: meanwhile the overview shows the error,
// the dead-letter page keeps answering from its index and says its read failed; after
// it, the error clears and the page follows the queue again.
func TestSurvivesBrokerOutage(t *testing.T) {
	lb := openLive(t, "redis")
	lb.seedDLQ(t, 20, seedTime)
	proxy, proxied := faultproxy.StartURL(t, lb.raw)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tr, err := transport.Open(ctx, proxied)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	srv := serve(t, []console.Broker{{URL: proxied, Transport: tr, Queues: []console.Queue{{Name: lb.work}}}},
		console.WithSampleInterval(100*time.Millisecond), console.WithStaleAfter(100*time.Millisecond))
	c := newClient(t, srv.URL)
	base := q("b", "0", "q", lb.dlq)

	type overview struct {
		Brokers []struct {
			Error  string `json:"error"`
			Queues []struct {
				DLQStats *transport.QueueStats `json:"dlq_stats"`
			} `json:"queues"`
		} `json:"brokers"`
	}
	until := func(what string, ok func(overview) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var o overview
			c.getJSON("/api/overview", &o)
			if ok(o) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: overview %+v", what, o)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var v dlqView
	c.getJSON("/api/dlq?wait=1&"+base, &v)
	if v.Total != 20 {
		t.Fatalf("before: %d messages", v.Total)
	}

	proxy.Down()
	until("the overview shows the broker's error", func(o overview) bool { return o.Brokers[0].Error != "" })
	if resp, body := c.get("/api/dlq?refresh=1&" + base); resp.StatusCode == http.StatusOK {
		t.Errorf("a read of the queue while the broker is away answered 200: %s", body)
	}
	resp, body := c.get("/dlq?" + base)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "reading the queue failed") || !strings.Contains(body, "<strong>20</strong>") {
		t.Errorf("the page while the broker is away: %d", resp.StatusCode)
	}

	proxy.Up()
	until("the error clears", func(o overview) bool { return o.Brokers[0].Error == "" })
	more := dlqtest.Mixed(lb.work, lb.dlq, 2, seedTime)
	if err := transport.PublishConfirmed(ctx, lb.tr, more.Messages()); err != nil {
		t.Fatal(err)
	}
	until("the DLQ count follows", func(o overview) bool {
		s := o.Brokers[0].Queues[0].DLQStats
		return s != nil && s.Ready == 22
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.getJSON("/api/dlq?"+base, &v)
		if v.Total == 22 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page did not follow the queue after the outage: %d", v.Total)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
