package redis

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The dial hook's wrapper keeps what go-redis looks for under a connection: a TCP
// connection stays a syscall.Conn (go-redis checks a pooled connection's socket before
// reusing it only then), and NetConn returns the connection wrapped.
func TestSilentConnLogKeepsTheSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := silentConnLog{log: slog.New(slog.DiscardHandler)}.DialHook(func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	})
	conn, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, ok := conn.(syscall.Conn); !ok {
		t.Errorf("the wrapped TCP connection %T is not a syscall.Conn", conn)
	}
	inner, ok := conn.(interface{ NetConn() net.Conn })
	if !ok {
		t.Fatalf("the wrapped connection %T has no NetConn", conn)
	}
	if _, ok := inner.NetConn().(*net.TCPConn); !ok {
		t.Errorf("NetConn = %T, want the *net.TCPConn dialled", inner.NetConn())
	}
}

// Only a read that waited for an answer is a dead connection: a read timing out on a
// deadline of milliseconds (go-redis probes a connection, TLS above all, for data it may
// hold) says nothing; one on a deadline of the read timeout's order is logged, once.
func TestSilentConnLogOnlyWhenAnAnswerWasAwaited(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // a peer that accepts and never answers
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	dial := silentConnLog{log: logger}.DialHook(func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	})
	conn, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	read := func(d time.Duration) {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(d))
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Fatal("a read from a peer that never answers returned data")
		}
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(logs.String(), "no answer within the read timeout")
	}
	read(20 * time.Millisecond) // a probe
	if n := count(); n != 0 {
		t.Fatalf("a probe's timeout was logged %d times: %s", n, logs.String())
	}
	read(600 * time.Millisecond) // a command waiting for its answer
	read(600 * time.Millisecond)
	if n := count(); n != 1 {
		t.Errorf("the dead connection was logged %d times, want once: %s", n, logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
