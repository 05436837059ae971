package babelqueue

import (
	"context"

	"github.com/babelqueue-go/babelqueue/internal/worker"
)

// MessageFromContext returns the message whose handler ctx belongs to, or nil. A
// handler's [App.Publish] with that context continues the message's trace. The hooks
// an [Observer] is told of a delivery see its message too (nil for a poison body or a
// schema-version rejection).
func MessageFromContext(ctx context.Context) *Message {
	m, _ := ctx.Value(worker.MessageKey{}).(*Message)
	return m
}

// ContextWithMessage returns a copy of ctx carrying m, so that [MessageFromContext]
// returns m. Middleware that hands the next handler a changed copy of the message (its
// data decrypted, say) passes the copy along with the context, so code that reads the
// message from the context sees the same one. The runtime settles the delivery from the
// received bytes whatever message the context carries.
func ContextWithMessage(ctx context.Context, m *Message) context.Context {
	return context.WithValue(ctx, worker.MessageKey{}, m)
}

// IsReplay reports whether the message being handled under ctx was put back by a redrive
// with bypass ([Message.IsReplay]).
func IsReplay(ctx context.Context) bool {
	m := MessageFromContext(ctx)
	return m != nil && m.IsReplay()
}

// UnlessReplay runs fn unless the message being handled under ctx is a replay: the side
// effects a redrive with bypass must not repeat (an e-mail, a charge).
func UnlessReplay(ctx context.Context, fn func() error) error {
	if IsReplay(ctx) {
		return nil
	}
	return fn()
}
