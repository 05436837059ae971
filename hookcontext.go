package babelqueue

import "context"

// hookContext is the context the hooks of one delivery are told under: for a body that
// is an envelope it carries the delivery's [Message], the one its handler is given, so
// [MessageFromContext] returns it in [ReceiveHook], [HandleHook] and [SettleHook] too.
// An observer pairs what its middleware saw in the handler with the settlement that
// followed this way (the otel module parents the span of a retry or dead-letter write
// on the handler's CONSUMER span).
func hookContext(ctx context.Context, m *Message) context.Context {
	if m == nil {
		return ctx
	}
	return context.WithValue(ctx, messageKey{}, m)
}
