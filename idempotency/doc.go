// Package idempotency turns at-least-once delivery into one effect per message: a
// handler wrapped by it runs once per meta.id, however many times the broker delivers
// the message. Every BabelQueue broker is at-least-once (a worker that dies before its
// acknowledgement gets its message delivered again; a producer that retries publishes
// it twice), and every SDK of the family has this helper (SPEC §8.1). The key is the
// envelope's meta.id, verbatim; never trace_id.
//
// # Semantics
//
// A wrapped handler, per delivery:
//
//   - runs, and when it returns nil the id is remembered in a [Store];
//   - does not run when the id is already remembered: the delivery is acknowledged;
//   - leaves the id free when it fails (an error, a panic, [babelqueue.NoRetry],
//     [babelqueue.Requeue]): retries and dead-lettering apply as without the helper, and
//     the next delivery runs it again;
//   - runs without dedupe when the envelope has no meta.id (fails open);
//   - runs again after [Store.Forget] of its id;
//   - fails the delivery (which the runtime retries) when the store answers with an
//     error, never skipping on a guess; the error is a [*StoreError].
//
// This is dedupe after success, not exactly-once delivery: a handler that succeeds and
// whose remember then fails, or a worker that dies between the two, can run the
// message again.
//
// # Two modes
//
// Seen-set mode ([ModeSeenSet]) is the family's base contract: ask the store whether
// the id was remembered, run, remember. Two workers that receive the same id at the
// same moment both find it free and both run it.
//
// Claim mode ([ModeClaim], the PHP SDK's ClaimingDispatch) closes that window: before
// the handler runs the id is claimed with a lease, in the same store call that checks
// whether it is remembered. A delivery whose id another live worker holds is given back
// to the broker with [babelqueue.Requeue] (not run, not lost, not counted as an
// attempt) and comes again after [WithHeldRetry], by when the holder has usually
// remembered it and the delivery is acknowledged. A failed handler releases its claim
// at once. A worker that dies mid-handler leaves a claim that lapses with its lease
// ([WithLease]); then a redelivery runs the message.
//
// Claim mode is the default whenever the store can claim (it implements [ClaimStore];
// every store of this SDK does), because it is the only mode that keeps the promise
// under concurrent duplicates, and it costs the same store calls as seen-set mode: one
// before the handler (check and claim folded), one after (remember). In the tests, 8
// workers given 2,000 messages each published twice side by side ran 2,000 effects in
// claim mode on every store and layout; in seen-set mode 1,712 to 1,879 (PostgreSQL),
// 1,989 to 2,000 (Redis) and 1,996 (memory) of the 2,000 ran twice, as the two copies
// reach two workers within microseconds of each other and both find the id free
// (idempotencytest.RunConcurrency, the figures of the runs made). What claim
// mode costs instead: a release call when a handler fails, and, when a worker dies
// mid-handler, a redelivery that waits out the lease. Choose the lease above your
// longest handler run (with [babelqueue.WithHandlerTimeout], above it): a handler
// still running when its lease lapses can be run a second time beside it.
//
// # Stores
//
// [MemoryStore] is one process's memory, for tests and single-process consumers. The
// modules idempotency/redisstore (go-redis) and idempotency/pgstore (PostgreSQL over
// pgx) are shared by a fleet, and use the layouts of the other SDKs' stores, so a Go
// worker and a worker of another SDK on the same queue and the same store dedupe each
// other's messages; their package documentation lists the keys, values, tables and
// columns. Both default to the layout of the public Go reference SDK, which SPEC §8.1
// names and whose Redis layout the Python SDK's helper is used with; the PHP SDK's is
// an option. Package idempotencytest is the behavioural kit every store runs.
package idempotency
