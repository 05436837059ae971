package servicebus

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue/transport"
)

// TestBrowsePages pages through a peek that, as Service Bus may, returns fewer
// messages than asked for: every message once, in sequence order, the cursor exact.
func TestBrowsePages(t *testing.T) {
	var stored []*azservicebus.ReceivedMessage
	for i := int64(1); i <= 23; i++ {
		seq := i * 2 // sequence numbers need not be dense
		pk := fmt.Sprintf("k%d", i%3)
		stored = append(stored, &azservicebus.ReceivedMessage{
			SequenceNumber: &seq, PartitionKey: &pk,
			Body:                  []byte(fmt.Sprintf(`{"n":%d}`, i)),
			ApplicationProperties: map[string]any{"traceparent": fmt.Sprint("tp-", i), PropAttempts: "2"},
		})
	}
	calls := 0
	peek := func(_ context.Context, from int64, n int) ([]*azservicebus.ReceivedMessage, error) {
		calls++
		var out []*azservicebus.ReceivedMessage
		for _, m := range stored {
			if *m.SequenceNumber >= from && len(out) < min(n, 3) {
				out = append(out, m)
			}
		}
		return out, nil
	}
	var got []string
	var from transport.Cursor
	for pages := 0; ; pages++ {
		seq, err := parseSequence(from)
		if err != nil {
			t.Fatal(err)
		}
		p, err := browsePages(context.Background(), "q", peek, seq, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range p.Deliveries {
			if d.Queue != "q" || d.Headers["traceparent"] == "" || d.Key == nil || d.AttemptsHeader != 2 {
				t.Errorf("delivery %+v", d)
			}
			got = append(got, string(d.Body))
		}
		if p.End {
			break
		}
		if len(p.Deliveries) != 5 || pages > 10 {
			t.Fatalf("a page of %d before the end", len(p.Deliveries))
		}
		from = p.Next
	}
	if len(got) != 23 || got[0] != `{"n":1}` || got[22] != `{"n":23}` {
		t.Errorf("browsed %v", got)
	}
	if _, err := parseSequence("x"); !errors.Is(err, transport.ErrBadCursor) {
		t.Errorf("bad cursor: %v", err)
	}
	failing := func(context.Context, int64, int) ([]*azservicebus.ReceivedMessage, error) {
		return nil, errors.New("namespace unreachable")
	}
	if _, err := browsePages(context.Background(), "q", failing, 0, 5); err == nil {
		t.Error("a failing peek gave no error")
	}
}
