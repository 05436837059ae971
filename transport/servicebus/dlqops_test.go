package servicebus

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/dlq"
	"github.com/babelqueue-go/babelqueue/dlq/dlqtest"
	"github.com/babelqueue-go/babelqueue/transport"
)

// TestExportPurgeImport runs package dlq's export, purge and import against the fake
// broker (no Service Bus namespace or emulator runs here): a selection of a mixed
// dead-letter queue is exported (the queue unchanged), purged exactly, archived first,
// and imported back, bodies, keys and headers compared.
func TestExportPurgeImport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := openFake(t, newFakeBroker())
	if err := transport.PublishConfirmed(ctx, tr, dlqtest.Mixed("orders", "orders.dlq", 60, time.Now()).Messages()); err != nil {
		t.Fatal(err)
	}
	wire := func(body, key []byte, h map[string]string) string { return fmt.Sprintf("%q|%q|%v", body, key, h) }
	held := func(keep dlq.Select) string {
		var out []string
		if err := transport.BrowseAll(ctx, tr, "orders.dlq", 100, func(d *transport.Delivery) bool {
			if keep == nil || keep(dlq.Read(d)) {
				out = append(out, wire(d.Body, d.Key, d.Headers))
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		sort.Strings(out)
		return fmt.Sprint(len(out), out)
	}
	records := func(data []byte) string {
		var out []string
		r := dlq.NewReader(bytes.NewReader(data))
		for {
			rec, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			body, key, _ := rec.Bytes()
			out = append(out, wire(body, key, rec.Headers))
		}
		sort.Strings(out)
		return fmt.Sprint(len(out), out)
	}
	sel, _ := dlq.ParseSelect([]string{"reason=poison|unknown_urn"}, time.Now())
	before, selected, unselected := held(nil), held(sel), held(func(e *dlq.Entry) bool { return !sel(e) })

	var exp bytes.Buffer
	if res, err := dlq.Export(ctx, tr, "orders.dlq", dlq.NewWriter(&exp), dlq.WithSelect(sel)); err != nil || res.Exported != 30 {
		t.Fatalf("export: %+v %v", res, err)
	}
	if records(exp.Bytes()) != selected || held(nil) != before {
		t.Fatalf("the export holds other messages than the selected ones, or changed the queue")
	}
	var archive bytes.Buffer
	res, err := dlq.Purge(ctx, tr, "orders.dlq", dlq.WithSelect(sel), dlq.WithExport(dlq.NewWriter(&archive)))
	if err != nil || res.Removed != 30 || res.Exported != 30 {
		t.Fatalf("purge: %+v %v, want 30 removed", res, err)
	}
	if got := held(nil); got != unselected {
		t.Fatalf("after the purge the queue holds\n%.300s\nwant the 30 unselected ones", got)
	}
	if records(archive.Bytes()) != selected {
		t.Fatalf("the archive holds other messages than the removed ones")
	}
	imp, err := dlq.Import(ctx, tr, dlq.NewReader(&archive))
	if err != nil || imp.Imported != 30 {
		t.Fatalf("import: %+v %v", imp, err)
	}
	if held(nil) != before {
		t.Fatalf("export, purge and import did not give back the queue it was")
	}
}
