package driverkit

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// WatchSilence wraps conn, a connection a broker client dialled, so that found is called
// once, with the read's error, the first time a read times out on a read deadline set
// at least atLeast ahead: the connection went silent while the client waited for an
// answer. A client that drops such a connection and retries on another without a word
// can then be made to log it when it happens (issue 38). Reads timing out on shorter
// deadlines (a client probing a connection for data it may hold) are left alone.
//
// The wrapper keeps what a client looks for under a connection: NetConn returns conn
// (as crypto/tls.Conn's does), and a conn that is a syscall.Conn (TCP) stays one.
func WatchSilence(conn net.Conn, atLeast time.Duration, found func(err error)) net.Conn {
	w := &silentConn{Conn: conn, atLeast: atLeast, found: found}
	if sc, ok := conn.(syscall.Conn); ok {
		return &silentSysConn{silentConn: w, sys: sc}
	}
	return w
}

// silentConn is the connection [WatchSilence] returns.
type silentConn struct {
	net.Conn
	atLeast time.Duration
	found   func(error)
	window  atomic.Int64 // the span of the read deadline last set, in ns; 0 for none
	logged  atomic.Bool
}

// silentSysConn is a silentConn over a connection with a file descriptor (TCP).
type silentSysConn struct {
	*silentConn
	sys syscall.Conn
}

// SyscallConn is the connection's own.
func (c *silentSysConn) SyscallConn() (syscall.RawConn, error) { return c.sys.SyscallConn() }

// SetDeadline records the read deadline's span and sets it.
func (c *silentConn) SetDeadline(t time.Time) error {
	c.note(t)
	return c.Conn.SetDeadline(t)
}

// SetReadDeadline records the read deadline's span and sets it.
func (c *silentConn) SetReadDeadline(t time.Time) error {
	c.note(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *silentConn) note(t time.Time) {
	if t.IsZero() {
		c.window.Store(0)
		return
	}
	c.window.Store(int64(time.Until(t)))
}

// NetConn returns the connection wrapped.
func (c *silentConn) NetConn() net.Conn { return c.Conn }

// Read reads from the connection, calling found on its first timeout after a long
// enough deadline.
func (c *silentConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() && time.Duration(c.window.Load()) >= c.atLeast &&
		c.logged.CompareAndSwap(false, true) {
		c.found(err)
	}
	return n, err
}
