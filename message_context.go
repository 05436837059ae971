package babelqueue

import "context"

// ContextWithMessage returns a copy of ctx carrying m, so that [MessageFromContext]
// returns m. Middleware that hands the next handler a changed copy of the message (its
// data decrypted, say) passes the copy along with the context, so code that reads the
// message from the context sees the same one. The runtime settles the delivery from the
// received bytes whatever message the context carries.
func ContextWithMessage(ctx context.Context, m *Message) context.Context {
	return context.WithValue(ctx, messageKey{}, m)
}
