// Package dlq is the operator's side of dead-letter queues: see what a dead-letter
// queue holds and why, count it, put back exactly the messages that should run again,
// and archive and discard the ones that should not, on any broker.
//
// A dead-letter queue holds what the runtime could not process: envelopes whose
// handler kept failing (reason "failed"), envelopes no handler was registered for
// ("unknown_urn") and bodies that are not envelopes at all ("poison"), each with the
// dead_letter block that says when, where and why (SPEC §3). [Read] turns one message
// into an [Entry] that exposes the block, the envelope and the original bytes.
//
// # Looking without touching
//
// [Collect] counts a queue by reason, URN, producing language, original queue and
// error [Fingerprint]; [List] pages through it and [Find] looks a message up by
// meta.id. They browse the queue through [transport.Browser] and never consume it; a
// broker that cannot browse answers with an error matching [transport.ErrCannotPeek].
//
// # Putting back
//
// [Redrive] moves messages back to the queue they failed on, or to a chosen queue,
// with attempts reset to 0 and the dead_letter block removed; every other byte, the
// key and the headers are kept. Options choose which ([WithSelect], built by hand or
// from text with [ParseSelect]), how many ([WithMax]), where ([WithTarget]), whether
// poison goes too ([WithPoison]), whether the handlers are told it is a replay
// ([WithBypass]: the bq-replay-bypass header the family's SDKs read), and whether
// anything changes at all ([WithDryRun]). Every move is a confirmed write followed by
// the acknowledgement of the dead-letter copy, so a redrive that fails or is
// interrupted loses nothing.
//
// # Archiving and discarding
//
// [Export] writes the messages a selection selects, byte for byte (poison bodies too),
// with their key and headers, as JSON lines ([Writer], one [Record] per line), and
// leaves them on the queue. [Purge] removes the messages a selection selects: a dry run
// counts them by reason and URN; [WithExport] archives each one, durably, before it is
// removed, so the archive holds every message removed even when the purge is killed; a
// message removed is never one the selection did not select. A broker whose queues are
// logs ([GroupLog]: Kafka) cannot delete a record: Purge says so ([ErrCannotRemove])
// unless [WithCommitPast] asks it to move the consumer group past the selected records.
// [Import] writes an export back ([Reader]), every write confirmed by the broker, to
// the queue each record came from or to another, on this broker or another one.
//
// The package uses the standard library only; the babelqueue command (cmd/babelqueue)
// puts a command line on it: dlq stats, dlq ls, dlq show, dlq redrive, dlq export,
// dlq purge, dlq import.
package dlq
