package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// The overview shows how long the oldest ready message has waited, in the page and in
// its API, where the broker tells it.
func TestOverviewShowsTheOldestMessage(t *testing.T) {
	srv, tr, _ := memoryConsole(t, 3)
	e, err := envelope.Make("urn:babel:orders:created", map[string]int{"n": 1}, envelope.WithQueue("orders"),
		envelope.WithCreatedAt(time.Now().Add(-90*time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	body, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(context.Background(), &transport.Message{Queue: "orders", Body: body}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, srv.URL)
	type overview struct {
		Brokers []struct {
			Queues []struct {
				Name      string                `json:"name"`
				Stats     *transport.QueueStats `json:"stats"`
				OldestAge *float64              `json:"oldest_age_s"`
			} `json:"queues"`
		} `json:"brokers"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var o overview
		c.getJSON("/api/overview", &o)
		q := o.Brokers[0].Queues[0]
		if q.Stats != nil && q.Stats.Ready == 1 && q.OldestAge != nil {
			if *q.OldestAge < 90*60 || *q.OldestAge > 91*60 {
				t.Errorf("oldest_age_s %v, want about 5400", *q.OldestAge)
			}
			if p := o.Brokers[0].Queues[1]; p.OldestAge == nil || *p.OldestAge != 0 {
				t.Errorf("an empty queue's oldest_age_s is %v, want 0", p.OldestAge)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the overview does not show the oldest message: %+v", o)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, page := c.get("/"); !strings.Contains(page, `data-k="oldest">1h30m0s<`) && !strings.Contains(page, `data-k="oldest">1h30m1s<`) {
		t.Errorf("the overview page does not show the age of the oldest message")
	}
}
