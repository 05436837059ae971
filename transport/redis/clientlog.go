package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

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

// silentConnLog is a go-redis hook that wraps each connection the client dials, so that a
// read that times out waiting for an answer (the connection went silent: no answer
// within the read timeout) is logged once, when it happens. go-redis then drops the connection and sends the
// command again on another, and says nothing (issue 38: a dead connection is logged
// when it is found). A transport opened by URL adds it to its own client; a client given
// to [New] is left as its program built it.
type silentConnLog struct{ log *slog.Logger }

func (h silentConnLog) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		w := &watchedConn{Conn: conn, log: h.log, addr: addr}
		if sc, ok := conn.(syscall.Conn); ok {
			// go-redis checks a pooled connection's socket before it reuses it, only
			// on a connection that is a syscall.Conn itself: keep that check.
			return &watchedSysConn{watchedConn: w, sys: sc}, nil
		}
		return w, nil
	}
}

func (silentConnLog) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (silentConnLog) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// watchedSysConn is a watchedConn over a connection with a file descriptor (TCP).
type watchedSysConn struct {
	*watchedConn
	sys syscall.Conn
}

// SyscallConn is the connection's own.
func (c *watchedSysConn) SyscallConn() (syscall.RawConn, error) { return c.sys.SyscallConn() }

// minAnswerWait is the shortest read deadline whose expiry says the connection is
// dead: go-redis also reads with deadlines of milliseconds, to probe a connection
// (TLS above all) for data it may hold, and those expire on healthy connections.
const minAnswerWait = 500 * time.Millisecond

// watchedConn is a connection whose first read timeout waiting for an answer (a read
// deadline of at least minAnswerWait) is logged.
type watchedConn struct {
	net.Conn
	log    *slog.Logger
	addr   string
	window atomic.Int64 // the span of the read deadline last set, in ns; 0 for none
	logged atomic.Bool
}

// SetDeadline records the read deadline's span and sets it.
func (c *watchedConn) SetDeadline(t time.Time) error {
	c.note(t)
	return c.Conn.SetDeadline(t)
}

// SetReadDeadline records the read deadline's span and sets it.
func (c *watchedConn) SetReadDeadline(t time.Time) error {
	c.note(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *watchedConn) note(t time.Time) {
	if t.IsZero() {
		c.window.Store(0)
		return
	}
	c.window.Store(int64(time.Until(t)))
}

// NetConn returns the connection it wraps (as crypto/tls.Conn's does), for go-redis's
// look at the socket under a wrapper.
func (c *watchedConn) NetConn() net.Conn { return c.Conn }

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() && time.Duration(c.window.Load()) >= minAnswerWait &&
		c.logged.CompareAndSwap(false, true) {
		c.log.Warn("redis: no answer within the read timeout; the connection is dropped and the command sent again on a new one",
			"addr", c.addr, "err", err)
	}
	return n, err
}
