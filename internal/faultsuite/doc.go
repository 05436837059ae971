// Package faultsuite is the engine of the repository's fault suite (issue 16): it runs
// a workload through a real broker while a fault happens, and accounts for every
// message afterwards, as an operator would check a queue after an incident.
//
// A run publishes a numbered stream of envelopes, one in ten of which always fails and
// so must end in the dead-letter queue with reason "failed"; worker processes (child
// processes, so that a SIGKILL is real) consume it with the runtime, and report what
// they received, handled and settled as JSON lines on their standard output (see
// [Event]); the run's own reader drains the dead-letter queue. A third of the way
// through the stream the fault is injected: a worker killed with SIGKILL, every
// worker's connections cut by a loopback TCP proxy, the broker restarted, or the
// dead-letter writes refused by the broker. It is healed after a while, the last third
// is published, and the run waits until every meta.id is accounted for. The [Ledger]
// then says how many messages were handled, dead-lettered, missing and duplicated, and
// how long the consumers took to recover ([Result]).
//
// The package knows no broker: a [Binding] (in the faults module) says how to reach
// one, how to refuse its dead-letter writes and how to restart a private one, and the
// worker process opens its transport through an [Opener]. It uses the standard library
// and the runtime only; [Markdown] renders results as the table of docs/reliability.md.
//
// [Soak] runs the same worker and the same pipes for a long time instead (issue 39):
// one worker process consumes a steady stream at half the peak the run measured first,
// with a failure mix, while the run samples its resident memory, Go heap, goroutines,
// open descriptors and end-to-end latency and judges their trend after the warm-up
// ([Trend]); its books ([SoakResult]) count by stream number, 16 bytes a message, so a
// run of millions of messages fits. faults/cmd/soak is its command (make soak; the
// short form runs in make test).
package faultsuite
