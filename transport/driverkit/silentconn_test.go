package driverkit_test

import (
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// silentPeer returns a TCP connection to a peer that accepts and never answers.
func silentPeer(t *testing.T) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// The wrapper keeps what a client looks for under a connection: a TCP connection stays
// a syscall.Conn, and NetConn returns the connection wrapped.
func TestWatchSilenceKeepsTheSocket(t *testing.T) {
	raw := silentPeer(t)
	conn := driverkit.WatchSilence(raw, time.Second, func(error) {})
	if _, ok := conn.(syscall.Conn); !ok {
		t.Errorf("the wrapped TCP connection %T is not a syscall.Conn", conn)
	}
	inner, ok := conn.(interface{ NetConn() net.Conn })
	if !ok {
		t.Fatalf("the wrapped connection %T has no NetConn", conn)
	}
	if inner.NetConn() != raw {
		t.Errorf("NetConn = %v, want the connection wrapped", inner.NetConn())
	}
}

// Only a read that timed out on a long enough deadline is reported, and only once.
func TestWatchSilenceReportsOnceAfterALongDeadline(t *testing.T) {
	var found atomic.Int32
	conn := driverkit.WatchSilence(silentPeer(t), 100*time.Millisecond, func(err error) {
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			t.Errorf("found(%v), want the read's timeout", err)
		}
		found.Add(1)
	})
	read := func(d time.Duration) {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(d))
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Fatal("a read from a peer that never answers returned data")
		}
	}
	read(10 * time.Millisecond) // a probe
	if n := found.Load(); n != 0 {
		t.Fatalf("a probe's timeout was reported %d times", n)
	}
	read(150 * time.Millisecond) // a wait for an answer
	read(150 * time.Millisecond)
	if n := found.Load(); n != 1 {
		t.Errorf("the silent connection was reported %d times, want once", n)
	}
}
