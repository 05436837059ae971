package dlq

import (
	"context"
	"errors"
	"fmt"

	"github.com/babelqueue-go/babelqueue/transport"
)

// WithExport makes a purge archive each message to w before it removes it: the
// record is written and synced ([Writer.Sync]: on disk, for a file) first, and a
// message whose record could not be written is not removed. So a purge interrupted at
// any point, or killed, has archived every message it removed (and perhaps the one in
// hand, which stays on the queue too). Purge only.
func WithExport(w *Writer) Option { return func(o *options) { o.export = w } }

// WithCommitPast lets a purge act on a broker whose queues are logs ([GroupLog]:
// Kafka), where no record can be deleted: the purge then moves the transport's
// consumer group past the selected records, and writes the unselected records it
// meets before the last selected one to the end of the log again, so that the group
// still sees them (each settlement one Kafka transaction: the write and the offset
// commit happen together or not at all). Every record stays in the log, for any other
// reader, until the log's retention removes it. Without this option a purge on such a
// broker fails with [ErrCannotRemove] and changes nothing. Purge only.
func WithCommitPast() Option { return func(o *options) { o.commitPast = true } }

// GroupLog is implemented by a transport whose queues are logs that a consumer group
// reads by committed offsets, such as the Kafka transport: acknowledging a message
// deletes nothing, it moves the group's committed offset on, and the record stays in
// the log for every other reader until the log's retention removes it. What such a
// transport shows as "the messages on a queue" (a browse, a count) is what its group
// has not committed yet. [Purge] asks for it to say so instead of reporting records
// deleted.
type GroupLog interface {
	// Group names the consumer group the transport's consumers join and its browse
	// starts from.
	Group() string
}

// ErrCannotRemove matches the error of a purge on a broker that cannot delete chosen
// messages (see [*CannotRemoveError]).
var ErrCannotRemove = errors.New("dlq: this broker cannot delete chosen messages")

// CannotRemoveError says why a purge changed nothing, and what the broker can do
// instead.
type CannotRemoveError struct {
	// Queue is the queue the purge was asked to act on.
	Queue string
	// Group is the consumer group whose committed offsets [WithCommitPast] would move.
	Group string
}

// Error says what cannot be done and what can.
func (e *CannotRemoveError) Error() string {
	return fmt.Sprintf("dlq: purge %q: nothing was removed: the broker keeps every record of a log until its retention ends and cannot delete chosen ones; "+
		"what it can do is move consumer group %q past the selected records, writing the unselected records among them to the end of the log again "+
		"(dlq.WithCommitPast; babelqueue dlq purge -commit-past)", e.Queue, e.Group)
}

// Is makes the error match [ErrCannotRemove].
func (e *CannotRemoveError) Is(target error) bool { return target == ErrCannotRemove }

// PurgeResult counts what [Purge] did.
type PurgeResult struct {
	// Queue is the dead-letter queue.
	Queue string `json:"queue"`
	// DryRun reports a dry run: nothing was changed, Removed is what would be.
	DryRun bool `json:"dry_run"`
	// Removed is the number of messages taken off the queue (on a dry run: that
	// would be). On a [GroupLog] broker, the records the consumer group was moved
	// past: they stay in the log.
	Removed int `json:"removed"`
	// Kept is the number of messages looked at and left on the queue because the
	// selection does not select them. On a real purge each was written back to the
	// end of the queue (bytes, key and headers unchanged) to get past it; the
	// messages after the last selected one are not touched. On a dry run it is every
	// unselected message of the queue.
	Kept int `json:"kept"`
	// Exported is the number of records [WithExport]'s writer took; it is at least
	// Removed, and one more when the purge stopped with a message archived and not
	// removed.
	Exported int `json:"exported"`
	// Selected counts the messages removed (on a dry run: that would be) by
	// reason, URN, language, original queue and error.
	Selected Stats `json:"selected"`
	// Stopped says why the purge ended.
	Stopped Stop `json:"stopped"`
	// Atomic reports that each settlement was one atomic step on the broker (a Redis
	// script; a RabbitMQ, Kafka or Pulsar transaction): a purge killed at any point
	// leaves each unselected message on the queue exactly once. When false, a kill
	// between the write that puts an unselected message back and the acknowledgement
	// of its copy leaves that one message on the queue twice, never none.
	Atomic bool `json:"atomic"`
	// Group is set on a [GroupLog] broker (Kafka): the consumer group whose
	// committed offsets the purge moved (would move); the records stay in the log.
	Group string `json:"group,omitempty"`
}

// Purge removes the messages of the dead-letter queue from that [WithSelect] selects
// (every message without it), at most [WithMax] of them; [WithDryRun] reports what it
// would remove and changes nothing. With [WithExport] each one is archived, durably,
// before it is removed.
//
// A message removed is always one the selection selected. Purge uses the broker's own
// consumer: it receives each message and acknowledges a selected one (after the
// archive write) with no write, which deletes it; an unselected one it meets is
// written back to the end of the queue and then acknowledged, as [Redrive] keeps what
// it does not move, so its bytes, key and headers stay but its place in the queue
// changes. When the transport can browse, the queue is read first and the purge stops
// once every selected message is gone, so the messages after the last of them are not
// touched. Where the broker offers it (a Redis script; RabbitMQ, Kafka and Pulsar
// transactions, [PurgeResult.Atomic]) the write back and the acknowledgement are one
// step; elsewhere (SQS, Artemis) a kill between them leaves that unselected message
// twice, never lost. A purge interrupted (ctx ends) settles the message in hand and
// returns what it did with [StopInterrupted] and a nil error.
//
// A broker whose queues are logs ([GroupLog]: Kafka) cannot delete a record: without
// [WithCommitPast] Purge returns a [*CannotRemoveError] and changes nothing (a dry run
// still reports what is selected); with it the group is moved past the selected records.
//
// Do not run a purge while a worker consumes the dead-letter queue.
func Purge(ctx context.Context, tr transport.Transport, from string, opts ...Option) (PurgeResult, error) {
	o := newOptions(opts)
	if from == "" {
		return PurgeResult{}, errors.New("dlq: purge: empty dead-letter queue name")
	}
	o.to = "" // a purge writes only to the queue it purges
	res := PurgeResult{Queue: from, DryRun: o.dryRun}
	if gl, ok := tr.(GroupLog); ok {
		res.Group = gl.Group()
		if !o.dryRun && !o.commitPast {
			res.Stopped = StopError
			return res, &CannotRemoveError{Queue: from, Group: res.Group}
		}
	}
	r := newRun(o, tr, from, "purge", Removed, WouldRemove)
	r.take = func(e *Entry) ([]*transport.Message, string, string, bool) {
		if o.sel != nil && !o.sel(e) {
			return nil, "", "not selected", false
		}
		return nil, "", "", true
	}
	if w := o.export; w != nil && !o.dryRun {
		r.taking = func(e *Entry) error {
			if err := w.Write(e); err != nil {
				return err
			}
			res.Exported++
			return w.Sync()
		}
	}
	var err error
	if o.dryRun {
		err = r.dry(ctx)
	} else {
		err = r.move(ctx)
	}
	res.Removed, res.Kept, res.Stopped, res.Atomic = r.res.Moved, r.res.Kept, r.res.Stopped, r.res.Atomic
	res.Selected = r.tally.Stats(from)
	return res, err
}
