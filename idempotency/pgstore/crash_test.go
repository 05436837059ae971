package pgstore_test

import (
	"testing"

	"github.com/babelqueue-go/babelqueue/idempotency/idempotencytest"
	"github.com/babelqueue-go/babelqueue/idempotency/pgstore"
	_ "github.com/babelqueue-go/babelqueue/transport/redis"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// crash is a worker on the Redis broker whose store is this run's reference table. A
// one-second visibility timeout brings the killed worker's reservation back soon; the
// queue's keys vanish once it is empty, so there is nothing to delete.
func crash(t *testing.T) idempotencytest.Crash {
	url := transporttest.BrokerURL(t, "BQ_REDIS_URL", "redis")
	newStore(t, pgstore.LayoutReference) // reachable and migrated
	return idempotencytest.Crash{BrokerURL: url + "?retry_after=1", Spec: spec(pgstore.LayoutReference), Open: openStore}
}

// A worker killed mid-handler in claim mode: the redelivery is requeued while the
// dead worker's claim row holds, then runs once when the lease lapses.
func TestCrashMidHandler(t *testing.T) {
	crash(t).Run(t, idempotencytest.KillMidHandler)
}

// The worker dies after the handler, before the acknowledgement: the broker redelivers
// the message, and it has one effect.
func TestRedeliveryAfterHandlerHasOneEffect(t *testing.T) {
	crash(t).Run(t, idempotencytest.KillAfterHandler)
}
