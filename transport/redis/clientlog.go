package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// go-redis has one process-wide logger (redis.SetLogger), which prints to the standard
// logger by default. A transport opened by URL sends those lines to the logger the
// runtime passed to the opener instead; with several such transports in one process,
// the one opened last wins. A program that builds its own client with [New] keeps
// go-redis's logger as it set it.
var clientLog atomic.Pointer[slog.Logger]

// routeClientLog makes go-redis's own log lines go to l.
func routeClientLog(l *slog.Logger) {
	if clientLog.Swap(l) == nil {
		goredis.SetLogger(slogPrinter{})
	}
}

// slogPrinter is go-redis's Logging interface over slog.
type slogPrinter struct{}

func (slogPrinter) Printf(ctx context.Context, format string, v ...any) {
	l := clientLog.Load()
	if l == nil {
		l = slog.Default()
	}
	l.WarnContext(ctx, "redis: go-redis: "+strings.TrimPrefix(strings.TrimSpace(fmt.Sprintf(format, v...)), "redis: "))
}
