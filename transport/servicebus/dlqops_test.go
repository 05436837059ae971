package servicebus

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/transport"
)

// TestPurgeAndImport runs package dlq's purge and import against the fake broker (no
// Service Bus namespace or emulator runs here; the fake cannot peek, so the purge
// walks the queue once by receiving, as on a broker that cannot browse): a selection
// of a mixed dead-letter queue is purged, exactly, archived first, and imported back,
// byte for byte.
func TestPurgeAndImport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := newFakeBroker()
	tr := openFake(t, b)
	s := dlqtest.Mixed("orders", "orders.dlq", 60, time.Now())
	if err := transport.PublishConfirmed(ctx, tr, s.Messages()); err != nil {
		t.Fatal(err)
	}
	held := func() string {
		var out []string
		for _, m := range b.waitingMessages("orders.dlq") {
			out = append(out, string(m.m.Body))
		}
		sort.Strings(out)
		return fmt.Sprint(len(out), out)
	}
	sel, _ := dlq.ParseSelect([]string{"reason=poison|unknown_urn"}, time.Now())
	var want []string
	for _, it := range s.Items {
		if it.Reason != "poison" && it.Reason != "unknown_urn" {
			want = append(want, string(it.Message.Body))
		}
	}
	sort.Strings(want)
	before := held()
	var archive bytes.Buffer
	res, err := dlq.Purge(ctx, tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithExport(dlq.NewWriter(&archive)), dlq.WithIdle(300*time.Millisecond))
	if err != nil || res.Removed != 30 || res.Exported != 30 || res.Kept != 30 {
		t.Fatalf("purge: %+v %v, want 30 removed and 30 kept", res, err)
	}
	if got := held(); got != fmt.Sprint(len(want), want) {
		t.Fatalf("after the purge the queue holds\n%.300s\nwant the 30 unselected ones", got)
	}
	imp, err := dlq.Import(ctx, tr, dlq.NewReader(&archive))
	if err != nil || imp.Imported != 30 {
		t.Fatalf("import: %+v %v", imp, err)
	}
	if got := held(); got != before {
		t.Fatalf("purge and import did not give back the queue it was")
	}
}
