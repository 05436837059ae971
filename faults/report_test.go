package faults_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
)

// A worker killed after its settlement reached the broker and before it reported it
// leaves an orphan nobody else settles: the run must tell it from a delivery the
// broker still holds for a dead consumer by the queue's residue, not call it stalled
// (a clean-clone CI run failed the Redis and SQS kill runs so, recovery 0s, nothing
// missing). Workers that report each settlement a second late make that case every
// time, on every broker of the suite.
func TestKillBetweenSettlementAndReport(t *testing.T) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			plan := faultsuite.Short(faultsuite.Kill)
			plan.ReportDelay = time.Second
			runCase(t, b.shared(t), plan, "settled by the killed worker itself")
		})
	}
}

// A worker whose connections come back after the stream's last message (its
// reconnection backs off past a short run's last second) has nothing left to settle
// unless the run keeps work coming: it must still be seen back, by the probes, not
// called stalled (an Artemis cut run failed so, once in about ten, its worker back 2 s
// after the heal). The first worker heals 2.5 s late here, every time.
func TestCutWorkerBackAfterTheStream(t *testing.T) {
	for _, b := range []broker{artemisBroker, redisBroker} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			plan := faultsuite.Short(faultsuite.Cut)
			plan.LateHeal = 2500 * time.Millisecond
			runCase(t, b.shared(t), plan, "probe messages published after the stream")
		})
	}
}

// runCase runs plan on binding and fails the test on any of the run's failures, or
// when no note of the run says note (the case the test is for did not happen).
func runCase(t *testing.T, binding *faultsuite.Binding, plan faultsuite.Plan, note string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := faultsuite.Run(ctx, binding, plan, faultsuite.Env{Spawn: spawnWorker, Logf: t.Logf, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("published %d, handled %d, dead-lettered %d, missing %d, duplicates %d; recovery %s (%s)",
		res.Published, res.Handled, res.DeadLettered, res.Missing, res.Duplicates, res.Recovery.Round(time.Millisecond), res.RecoveryOf)
	seen := false
	for _, n := range res.Notes {
		t.Log("  " + n)
		seen = seen || strings.Contains(n, note)
	}
	for _, f := range res.Failures(2) {
		t.Error(f)
	}
	if !seen {
		t.Errorf("no note says %q: the case this test is for did not happen", note)
	}
}
