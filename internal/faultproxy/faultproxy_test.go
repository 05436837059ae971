package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
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
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, line string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func mustEcho(t *testing.T, c net.Conn, line string) {
	t.Helper()
	got, err := roundTrip(c, line)
	if err != nil || got != line {
		t.Fatalf("echo %q: got %q, %v", line, got, err)
	}
}

func TestProxyDownAndUp(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustEcho(t, c, "before")

	p.Down()
	if _, err := roundTrip(c, "during"); err == nil {
		t.Fatal("a connection carried across Down still answers")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		if _, err := roundTrip(c2, "new while down"); err == nil {
			t.Fatal("a connection made while down answers")
		}
		c2.Close()
	}

	p.Up()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	mustEcho(t, c3, "after")
}

func TestDialContextDownAndUp(t *testing.T) {
	target := echoServer(t)
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	c, err := p.DialContext(ctx, "tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustEcho(t, c, "before")
	p.Down()
	if _, err := roundTrip(c, "during"); err == nil {
		t.Fatal("a dialled connection survives Down")
	}
	if _, err := p.DialContext(ctx, "tcp", target); !errors.Is(err, ErrDown) {
		t.Fatalf("dial while down: got %v, want ErrDown", err)
	}
	p.Up()
	c2, err := p.DialContext(ctx, "tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	mustEcho(t, c2, "after")
}

func TestOnlyLoopback(t *testing.T) {
	for _, addr := range []string{"10.0.0.1:6379", "example.com:80", "no-port"} {
		if _, err := New(addr); err == nil {
			t.Errorf("New(%q) accepted a target off the loopback", addr)
		}
	}
	p, err := New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.DialContext(context.Background(), "tcp", "192.168.1.1:9092"); err == nil {
		t.Error("DialContext dialled an address off the loopback")
	}
}
