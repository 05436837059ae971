package worker_test

import (
	"testing"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/internal/worker"
)

// The names the worker and the settlement rule write are the ones the root package
// exports to users.
func TestNamesAreTheRootPackages(t *testing.T) {
	for _, c := range [][2]string{
		{worker.UnsupportedSchemaRoute, babelqueue.UnsupportedSchemaRoute},
		{settle.ReasonFailed, babelqueue.ReasonFailed},
		{settle.ReasonUnknownURN, babelqueue.ReasonUnknownURN},
		{settle.ReasonPoison, babelqueue.ReasonPoison},
	} {
		if c[0] != c[1] {
			t.Errorf("internal %q, exported %q", c[0], c[1])
		}
	}
	for k := settle.Handled; k <= settle.Requeued; k++ {
		switch babelqueue.Kind(k.String()) {
		case babelqueue.KindHandled, babelqueue.KindFailed, babelqueue.KindUnknownURN, babelqueue.KindPoison,
			babelqueue.KindSchemaRejected, babelqueue.KindUnretryable, babelqueue.KindRequeued:
		default:
			t.Errorf("kind %q is not an exported Kind", k)
		}
	}
	for a := settle.ActAck; a <= settle.ActRewind; a++ {
		switch babelqueue.Action(a.String()) {
		case babelqueue.ActionAck, babelqueue.ActionDrop, babelqueue.ActionRetry, babelqueue.ActionRelease, babelqueue.ActionDeadLetter,
			babelqueue.ActionPoisonDeadLetter, babelqueue.ActionPoisonRetry, babelqueue.ActionRawDeadLetter, babelqueue.ActionHandOff, babelqueue.ActionRewind:
		default:
			t.Errorf("action %q is not an exported Action", a)
		}
	}
}
