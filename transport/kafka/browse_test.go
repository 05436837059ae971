package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// TestBrowsePartitionsAndCommittedOffsets pages through a topic of three partitions:
// every record once, partition by partition, and a browse starts where the group's
// committed offsets say the queue begins.
func TestBrowsePartitionsAndCommittedOffsets(t *testing.T) {
	tr := openKafka(t)
	q := newTopic(t, "bqtest-browse3")
	createTopic(t, q, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ms []*transport.Message
	for i := range 30 {
		ms = append(ms, &transport.Message{Queue: q, Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), Key: []byte(fmt.Sprintf("k%d", i%7))})
	}
	if err := transport.PublishConfirmed(ctx, tr, ms); err != nil {
		t.Fatal(err)
	}
	walk := func() []string {
		var out []string
		var from transport.Cursor
		for range 100 {
			p, err := tr.Browse(ctx, q, from, 4)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range p.Deliveries {
				out = append(out, string(d.Body))
			}
			if p.End {
				return out
			}
			from = p.Next
		}
		t.Fatal("browse did not end")
		return nil
	}
	all := walk()
	seen := map[string]int{}
	for _, b := range all {
		seen[b]++
	}
	if len(all) != 30 || len(seen) != 30 {
		t.Fatalf("browsed %d records (%d distinct), want 30", len(all), len(seen))
	}
	// Consume and commit ten: the browse now starts after them.
	c := consumeOn(t, tr, q, 1)
	for range 10 {
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		d, err := c.Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatal(err)
		}
		settleOK(t, c, d, transport.Settlement{Outcome: transport.Ack})
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := walk(); len(left) != 20 {
		t.Fatalf("after ten committed, a browse shows %d, want 20", len(left))
	}
}
