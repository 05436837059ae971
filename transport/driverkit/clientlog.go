package driverkit

import (
	"context"
	"log/slog"
)

// ClientLog is the slog.Handler a driver gives its broker client: the client's records
// go to Handler at the level Level maps them to (the client's chatter lowered to
// Debug), and Watch, when set, sees every record from WatchFrom up whatever Handler
// keeps, for a client that reports some failures only in a log line.
type ClientLog struct {
	Handler slog.Handler
	// Level maps the client's level to the one logged; nil keeps it.
	Level func(slog.Level) slog.Level
	// Watch sees each record at WatchFrom or above before it is logged.
	Watch     func(slog.Record)
	WatchFrom slog.Level
}

// InfoAsDebug is a ClientLog.Level that lowers Info to Debug: a client's line for
// every connection it opens or closes stays out of the application's log.
func InfoAsDebug(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

func (h ClientLog) level(l slog.Level) slog.Level {
	if h.Level == nil {
		return l
	}
	return h.Level(l)
}

// Enabled reports whether Handler logs records of l, or Watch wants them.
func (h ClientLog) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Watch != nil && l >= h.WatchFrom || h.Handler.Enabled(ctx, h.level(l))
}

// Handle shows r to Watch and logs it at its mapped level.
func (h ClientLog) Handle(ctx context.Context, r slog.Record) error {
	if h.Watch != nil && r.Level >= h.WatchFrom {
		h.Watch(r)
	}
	r.Level = h.level(r.Level)
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs returns the ClientLog of Handler.WithAttrs(as).
func (h ClientLog) WithAttrs(as []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(as)
	return h
}

// WithGroup returns the ClientLog of Handler.WithGroup(name).
func (h ClientLog) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}
