package redis

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
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

// silentConnLog is a go-redis hook that wraps each connection the client dials
// ([driverkit.WatchSilence]), so that a read that times out waiting for an answer (the
// connection went silent: no answer within the read timeout) is logged once, when it
// happens. go-redis then drops the connection and sends the command again on another,
// and says nothing (issue 38: a dead connection is logged when it is found). A
// transport opened by URL adds it to its own client; a client given to [New] is left as
// its program built it.
type silentConnLog struct{ log *slog.Logger }

func (h silentConnLog) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return driverkit.WatchSilence(conn, minAnswerWait, func(err error) {
			h.log.Warn("redis: no answer within the read timeout; the connection is dropped and the command sent again on a new one",
				"addr", addr, "err", err)
		}), nil
	}
}

func (silentConnLog) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (silentConnLog) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// minAnswerWait is the shortest read deadline whose expiry says the connection is
// dead: go-redis also reads with deadlines of milliseconds, to probe a connection
// (TLS above all) for data it may hold, and those expire on healthy connections.
const minAnswerWait = 500 * time.Millisecond
