// Package faults is the repository's fault suite (issue 16): every real broker run
// through a workload while a worker is killed with SIGKILL, the connections are cut
// through a loopback TCP proxy, a private broker is restarted, or the broker refuses
// the dead-letter writes; every meta.id is accounted for afterwards. The engine is
// internal/faultsuite; this module holds the broker bindings and the test, TestFaults.
//
//	go test ./faults/                  the short form (300 messages a run), as make test runs it
//	BQ_FAULTS=full go test ./faults/   the full form (3,000 messages, every scenario): make faults
//
// docs/reliability.md has the table of the full form's last run and what each binding
// guarantees. The module also holds the soak benchmark, faults/cmd/soak (make soak; its
// short form runs in make test), on the same engine.
package faults
