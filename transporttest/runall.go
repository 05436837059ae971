package transporttest

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Case names a group of the kit's cases that [RunAll] runs.
type Case string

// The groups of cases [RunAll] runs. Each runs unless [Harness.Without] gives the
// reason it is left out; a group that needs something of the harness (an opener, a
// fault hook) fails RunAll when it is missing and no reason is given.
const (
	// CaseTransport is [Run]: the consumer contract (publish, receive, rewind, settle
	// writes, delays, close, context).
	CaseTransport Case = "Transport"
	// CaseSettleWriteFailure is Run's SettleWriteFailureAcksNothing; it needs
	// [Config.BreakSettleWrites].
	CaseSettleWriteFailure Case = "SettleWriteFailure"
	// CasePrefetchBound is Run's PrefetchBound.
	CasePrefetchBound Case = "PrefetchBound"
	// CaseSettleAfterClose is Run's SettleAfterClose.
	CaseSettleAfterClose Case = "SettleAfterClose"
	// CaseRefusesBadSettlements is Run's RefusesBadSettlements.
	CaseRefusesBadSettlements Case = "RefusesBadSettlements"
	// CaseRuntime is [RunRuntime]: the runtime's settlement rules end to end.
	CaseRuntime Case = "Runtime"
	// CasePublishConfirmed is [RunPublishConfirmed].
	CasePublishConfirmed Case = "PublishConfirmed"
	// CaseBrowse is [RunBrowse]; it applies to a [transport.Browser].
	CaseBrowse Case = "Browse"
	// CaseStats is [RunStats]; it applies to a [transport.QueueStatter].
	CaseStats Case = "Stats"
	// CaseSizeLimit is [RunSizeLimit]; it needs [Harness.OpenWithLimit].
	CaseSizeLimit Case = "SizeLimit"
	// CasePipelined is [RunPipelinedClose] and [RunRuntimeShutdownWithPipelinedWrites];
	// it needs [Harness.OpenPipelined].
	CasePipelined Case = "Pipelined"
)

var allCases = []Case{
	CaseTransport, CaseSettleWriteFailure, CasePrefetchBound, CaseSettleAfterClose,
	CaseRefusesBadSettlements, CaseRuntime, CasePublishConfirmed, CaseBrowse, CaseStats,
	CaseSizeLimit, CasePipelined,
}

// Harness is what [RunAll] needs of a driver: the transport under test (its Config)
// and what the driver declares about it.
type Harness struct {
	// Config opens the transport under test and describes its broker. RunAll sets its
	// PrefetchBound, SettleAfterClose and RefusesBadSettlements from Without.
	Config
	// Broker is the name the driver's errors use ("redis"), for CaseSizeLimit.
	Broker string
	// Browse and Stats are the broker's options for CaseBrowse and CaseStats.
	Browse BrowseOptions
	Stats  StatsOptions
	// OpenWithLimit opens a transport whose size check refuses messages above limit
	// bytes (CaseSizeLimit).
	OpenWithLimit func(t *testing.T, limit int) transport.Transport
	// OpenPipelined opens two transports on the broker: direct, a
	// [transport.ConfirmedPublisher], and pipelined, with its settle writes pipelined
	// (CasePipelined). The kit closes them.
	OpenPipelined func(t *testing.T) (direct, pipelined transport.Transport)
	// Without maps each group of cases left out to the reason, written beside the
	// declaration (an empty reason fails RunAll).
	Without map[Case]string
	// Parallel runs the groups side by side (t.Parallel), for a broker whose cases
	// are slow and independent (every case on queues of its own).
	Parallel bool
	// Adjust, when set, changes the Config one group runs with (a copy), for a group
	// that needs the broker set up otherwise (a prefetch of one for exact counts).
	Adjust func(c Case, cfg *Config)
}

// RunAll runs every group of the kit's cases the transport supports: the consumer
// contract, the runtime, confirmed publishes, and, by what the transport is and what the
// harness gives, browse, stats, size limits and pipelined settle writes. A group is left
// out only with a reason in [Harness.Without]; one that applies but lacks what it needs
// of the harness fails the test. The groups left out are logged with their reasons.
func RunAll(t *testing.T, h Harness) {
	h.defaults()
	for c, why := range h.Without {
		if !slices.Contains(allCases, c) {
			t.Errorf("transporttest.RunAll: Without names %q, which is no case of the kit", c)
		}
		if why == "" {
			t.Errorf("transporttest.RunAll: Without[%s] gives no reason", c)
		}
	}
	tr := h.Open(t)
	_, browser := tr.(transport.Browser)
	_, statter := tr.(transport.QueueStatter)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_ = tr.Close(ctx)
	cancel()

	left := map[Case]string{}
	runs := func(c Case, applies bool, why string, has bool, needs string) bool {
		if reason, out := h.Without[c]; out {
			left[c] = reason
			return false
		}
		if !applies {
			left[c] = why
			return false
		}
		if !has {
			t.Errorf("transporttest.RunAll: %s applies to this transport but the harness has no %s: give it, or the reason in Harness.Without", c, needs)
			return false
		}
		return true
	}
	base := h.Config
	if !runs(CaseSettleWriteFailure, true, "", base.BreakSettleWrites != nil, "Config.BreakSettleWrites") {
		base.BreakSettleWrites = nil
	}
	base.PrefetchBound = runs(CasePrefetchBound, true, "", true, "")
	base.SettleAfterClose = runs(CaseSettleAfterClose, true, "", true, "")
	base.RefusesBadSettlements = runs(CaseRefusesBadSettlements, true, "", true, "")
	par := func(t *testing.T) {
		if h.Parallel {
			t.Parallel()
		}
	}
	config := func(c Case) Config {
		cfg := base
		if h.Adjust != nil {
			h.Adjust(c, &cfg)
		}
		return cfg
	}
	if runs(CaseTransport, true, "", true, "") {
		t.Run(string(CaseTransport), func(t *testing.T) { par(t); Run(t, config(CaseTransport)) })
	}
	if runs(CaseRuntime, true, "", true, "") {
		t.Run(string(CaseRuntime), func(t *testing.T) { par(t); RunRuntime(t, config(CaseRuntime)) })
	}
	if runs(CasePublishConfirmed, true, "", true, "") {
		t.Run(string(CasePublishConfirmed), func(t *testing.T) { par(t); RunPublishConfirmed(t, config(CasePublishConfirmed)) })
	}
	if runs(CaseBrowse, browser, "not a transport.Browser", true, "") {
		t.Run(string(CaseBrowse), func(t *testing.T) { par(t); RunBrowse(t, config(CaseBrowse), h.Browse) })
	}
	if runs(CaseStats, statter, "not a transport.QueueStatter", true, "") {
		t.Run(string(CaseStats), func(t *testing.T) { par(t); RunStats(t, config(CaseStats), h.Stats) })
	}
	if runs(CaseSizeLimit, true, "", h.OpenWithLimit != nil && h.Broker != "", "OpenWithLimit and Broker") {
		t.Run(string(CaseSizeLimit), func(t *testing.T) { par(t); RunSizeLimit(t, config(CaseSizeLimit), h.Broker, h.OpenWithLimit) })
	}
	if runs(CasePipelined, true, "", h.OpenPipelined != nil, "OpenPipelined") {
		t.Run(string(CasePipelined), func(t *testing.T) {
			par(t)
			t.Run("Close", func(t *testing.T) {
				direct, pipelined := h.OpenPipelined(t)
				t.Cleanup(func() { _ = direct.Close(context.Background()) })
				RunPipelinedClose(t, direct, pipelined)
			})
			t.Run("RuntimeShutdown", func(t *testing.T) {
				direct, pipelined := h.OpenPipelined(t)
				t.Cleanup(func() {
					_ = direct.Close(context.Background())
					_ = pipelined.Close(context.Background())
				})
				RunRuntimeShutdownWithPipelinedWrites(t, direct, pipelined)
			})
		})
	}
	names := make([]string, 0, len(left))
	for c := range left {
		names = append(names, string(c))
	}
	sort.Strings(names)
	for _, c := range names {
		t.Logf("transporttest.RunAll: left out %s: %s", c, left[Case(c)])
	}
}
