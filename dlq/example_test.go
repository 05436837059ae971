package dlq_test

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// exampleBroker is a memory broker holding twenty dead letters of the queue orders.
func exampleBroker() *memory.Transport {
	tr := memory.New()
	s := dlqtest.Mixed("orders", "orders.dlq", 20, time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	for _, m := range s.Messages() {
		_ = tr.Publish(context.Background(), m)
	}
	return tr
}

// Count a dead-letter queue by reason and by error, without consuming it.
func ExampleCollect() {
	tr := exampleBroker()
	st, err := dlq.Collect(context.Background(), tr, "orders.dlq", nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("total", st.Total)
	for _, g := range st.Reasons {
		fmt.Println(g.Count, g.Key)
	}
	fmt.Println("top error:", st.Errors[0].Key)
	// Output:
	// total 20
	// 10 failed
	// 6 unknown_urn
	// 4 poison
	// top error: no handler for urn:babel:ghost:event
}

// Put back the python producer's failed messages only, marked as replays, after a dry
// run said what would move.
func ExampleRedrive() {
	tr := exampleBroker()
	ctx := context.Background()
	sel, err := dlq.ParseSelect([]string{"reason=failed", "lang=python"}, time.Now())
	if err != nil {
		panic(err)
	}
	plan, _ := dlq.Redrive(ctx, tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithDryRun())
	fmt.Println("would move", plan.Moved)

	res, err := dlq.Redrive(ctx, tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithBypass(), dlq.WithIdle(100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	fmt.Println("moved", res.Moved, "to orders:", res.To["orders"])
	fmt.Println("left on the DLQ:", len(tr.Messages("orders.dlq")))
	fmt.Println("replay header:", tr.Messages("orders")[0].Headers[dlq.ReplayBypassHeader])
	// Output:
	// would move 4
	// moved 4 to orders: 4
	// left on the DLQ: 16
	// replay header: 1
}

// The same failure of many messages reads the same once numbers and ids are masked.
func ExampleFingerprint() {
	fmt.Println(dlq.Fingerprint("order 1042 not found (request 3f2a9c1e-0b7d-4e15-9a43-1c2d3e4f5a6b)"))
	fmt.Println(dlq.Fingerprint("order 77 not found (request 0b7d3f2a-9c1e-4e15-9a43-6b5a4f3e2d1c)"))
	// Output:
	// order <n> not found (request <uuid>)
	// order <n> not found (request <uuid>)
}

// Archive the poison messages and the unknown URNs, then remove them: a dry run says
// what would go, the purge writes each message to the archive before it removes it,
// and an import puts the archive back (here, onto another queue).
func ExamplePurge() {
	tr := exampleBroker()
	ctx := context.Background()
	sel, err := dlq.ParseSelect([]string{"reason=poison|unknown_urn"}, time.Now())
	if err != nil {
		panic(err)
	}
	plan, _ := dlq.Purge(ctx, tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithDryRun())
	for _, g := range plan.Selected.Reasons {
		fmt.Println("would remove", g.Count, g.Key)
	}

	var archive bytes.Buffer // an *os.File in real life: each record is synced before its message goes
	res, err := dlq.Purge(ctx, tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithExport(dlq.NewWriter(&archive)), dlq.WithIdle(100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	fmt.Println("removed", res.Removed, "archived", res.Exported, "left", len(tr.Messages("orders.dlq")))

	back, err := dlq.Import(ctx, tr, dlq.NewReader(&archive), dlq.WithTarget("quarantine.dlq"))
	if err != nil {
		panic(err)
	}
	fmt.Println("imported", back.Imported, "to quarantine.dlq:", len(tr.Messages("quarantine.dlq")))
	// Output:
	// would remove 6 unknown_urn
	// would remove 4 poison
	// removed 10 archived 10 left 10
	// imported 10 to quarantine.dlq: 10
}

// Export the dead letters of one URN as JSON lines, leaving them on the queue.
func ExampleExport() {
	tr := exampleBroker()
	sel, _ := dlq.ParseSelect([]string{"urn=urn:babel:payments:*"}, time.Now())
	var out bytes.Buffer
	res, err := dlq.Export(context.Background(), tr, "orders.dlq", dlq.NewWriter(&out), dlq.WithSelect(sel))
	if err != nil {
		panic(err)
	}
	rec, _ := dlq.NewReader(&out).Next()
	fmt.Println("exported", res.Exported, "of", res.Exported+res.Skipped, "- first:", rec.URN, rec.Reason)
	fmt.Println("still on the queue:", len(tr.Messages("orders.dlq")))
	// Output:
	// exported 4 of 20 - first: urn:babel:payments:captured failed
	// still on the queue: 20
}
