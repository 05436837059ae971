package transporttest

import (
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// SettleFailure is one report of a consumer through [transport.ConsumeOptions.SettleFailed].
type SettleFailure struct {
	Delivery   *transport.Delivery
	Settlement transport.Settlement
	Err        error
}

// SettleFailures records what a consumer that pipelines its settle writes reports
// through [transport.ConsumeOptions.SettleFailed]: pass its Record as that option. The
// zero value is ready to use; it is safe for concurrent use.
type SettleFailures struct {
	mu  sync.Mutex
	got []SettleFailure
}

// Record is a [transport.ConsumeOptions.SettleFailed].
func (f *SettleFailures) Record(d *transport.Delivery, s transport.Settlement, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, SettleFailure{Delivery: d, Settlement: s, Err: err})
}

// Got returns the reports so far.
func (f *SettleFailures) Got() []SettleFailure {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]SettleFailure(nil), f.got...)
}

// Expect waits up to timeout for n reports and fails t unless there are exactly n then
// (it waits the whole timeout only while fewer have come). It returns them.
func (f *SettleFailures) Expect(t testing.TB, n int, timeout time.Duration) []SettleFailure {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for len(f.Got()) < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	got := f.Got()
	if len(got) != n {
		t.Fatalf("ConsumeOptions.SettleFailed was called %d times, want %d: %v", len(got), n, got)
	}
	for i, g := range got {
		if g.Delivery == nil || g.Err == nil || len(g.Settlement.Writes) == 0 {
			t.Errorf("report %d of SettleFailed: delivery %v, error %v, %d writes; want the delivery given to Settle, the write's error and its writes", i, g.Delivery, g.Err, len(g.Settlement.Writes))
		}
	}
	return got
}
