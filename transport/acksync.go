package transport

import "context"

// AckSyncer is implemented by consumers whose acknowledgements become durable only
// after Settle returns: Kafka commits offsets in the background, so a process killed
// between a settle and the next commit has the record delivered again. A tool that
// moves messages between queues (a redrive, a bridge) calls SyncAcks after each move,
// so that a kill leaves at most the message in hand in both queues.
type AckSyncer interface {
	// SyncAcks returns once every acknowledgement made before the call is durable
	// on the broker, or with the broker's error.
	SyncAcks(ctx context.Context) error
}

// SyncAcks makes c's acknowledgements durable when c is an [AckSyncer]; for any other
// consumer, whose Settle returns once the broker has the acknowledgement, it does
// nothing.
func SyncAcks(ctx context.Context, c Consumer) error {
	if s, ok := c.(AckSyncer); ok {
		return s.SyncAcks(ctx)
	}
	return nil
}
