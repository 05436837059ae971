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
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := faultsuite.Run(ctx, b.shared(t), plan, faultsuite.Env{Spawn: spawnWorker, Logf: t.Logf, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("published %d, handled %d, dead-lettered %d, missing %d, duplicates %d; recovery %s (%s)",
				res.Published, res.Handled, res.DeadLettered, res.Missing, res.Duplicates, res.Recovery.Round(time.Millisecond), res.RecoveryOf)
			for _, n := range res.Notes {
				t.Log("  " + n)
			}
			for _, f := range res.Failures(2) {
				t.Error(f)
			}
			if !hasNote(res.Notes, "settled by the killed worker itself") {
				t.Error("the kill landed on no settlement the run was not told of: the case this test is for did not happen")
			}
		})
	}
}

func hasNote(notes []string, s string) bool {
	for _, n := range notes {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}
