// Package faultproxy takes a broker away from a client and brings it back, without
// touching the broker: fault tests run against the brokers other test suites share, so
// they never stop them. A [Proxy] forwards loopback TCP connections to a target; while it
// is down it cuts every connection it forwards and refuses new ones (it stops
// listening), as a host whose broker went away does; while it is frozen ([Proxy.Freeze]) every connection stays open
// and silent, as behind a network that drops packets, and [Proxy.Strand] leaves the
// connections open at that moment silent for good while new ones pass, as after a
// partition that healed behind a middlebox that forgot the old connections. Its [Proxy.DialContext] gives the same switch to clients that
// find their broker's address themselves (a Kafka client dials the addresses the
// cluster's metadata names, not a proxy's). Only loopback targets are allowed.
//
// It uses the standard library only.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// ErrDown is returned by [Proxy.DialContext] while the proxy is down.
var ErrDown = errors.New("faultproxy: target is down")

// Proxy forwards TCP connections to one loopback target. Its methods are safe for
// concurrent use.
type Proxy struct {
	target string
	addr   string // where it listens, kept while it is down

	lnMu sync.Mutex   // guards ln; taken before mu when both are
	ln   net.Listener // nil while the proxy is down

	mu     sync.Mutex
	down   bool
	closed bool
	conns  map[net.Conn]struct{}
	thawed chan struct{} // closed while bytes flow; open while the proxy is frozen
	// stranded are the connections Strand froze for good (a subset of conns).
	stranded map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// New starts a proxy for target (host:port on a loopback address) listening on a free
// loopback port. It starts up.
func New(target string) (*Proxy, error) {
	if err := checkLoopback(target); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	thawed := make(chan struct{})
	close(thawed)
	p := &Proxy{target: target, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}, thawed: thawed, stranded: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// checkLoopback refuses any address that is not on the loopback interface.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("faultproxy: bad address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("faultproxy: %q is not a loopback address", addr)
	}
	return nil
}

// Addr is the host:port clients connect to instead of the target.
func (p *Proxy) Addr() string { return p.addr }

// Down cuts every connection the proxy carries (and every one DialContext made) and
// makes new ones fail until Up: the proxy stops listening, so a dial is refused, as
// by a host whose broker is gone (nothing a client sends then can reach the broker).
func (p *Proxy) Down() {
	p.lnMu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	p.lnMu.Unlock()
	p.mu.Lock()
	p.down = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.stranded = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// Up lets connections through again: the proxy listens again on its address.
func (p *Proxy) Up() {
	p.lnMu.Lock()
	defer p.lnMu.Unlock()
	p.mu.Lock()
	p.down = false
	closed := p.closed
	p.mu.Unlock()
	if closed || p.ln != nil {
		return
	}
	// The port was ours a moment ago; another listener may take it meanwhile only by
	// chance, and then the proxy stays unreachable (a test sees its broker gone).
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
}

// Freeze turns the proxy into a black hole: every connection stays open, new ones are
// accepted, and no byte passes either way until Thaw, as on a network that drops packets
// without resetting anything. What was sent meanwhile is delivered after Thaw, as TCP
// retransmits it once a partition heals. Down still cuts frozen connections.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default: // already frozen
	}
}

// Thaw lets bytes through again after Freeze.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// Strand thaws the proxy for new connections only: every connection open now stays
// frozen until it is closed (a client that finds it dead and drops it), and every
// connection made from now on passes, as when a partition heals behind a middlebox that
// forgot the connections of before. The proxy need not be frozen first. Down still cuts
// stranded connections. A connection the client closes is closed towards the target
// too: the target learns of it at once, where a real black hole would leave it to the
// target's own timeouts.
func (p *Proxy) Strand() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		p.stranded[c] = struct{}{}
	}
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// gate returns a channel that is closed while bytes may pass on c (nil, never closed,
// for a stranded connection), and whether c is still carried.
func (p *Proxy) gate(c net.Conn) (gate <-chan struct{}, live bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, live = p.conns[c]
	if _, stranded := p.stranded[c]; stranded {
		return nil, live
	}
	return p.thawed, live
}

// waitThawed blocks while c is frozen (the proxy frozen, or c stranded). It returns nil
// once bytes may pass, [net.ErrClosed] when c was cut or closed meanwhile (Down, Close,
// the other side of its pair ending), so a frozen copy never outlives its connection,
// and [os.ErrDeadlineExceeded] once deadline (when not zero) passes, as a read or write
// of a silent network times out.
func (p *Proxy) waitThawed(c net.Conn, deadline time.Time) error {
	for {
		gate, live := p.gate(c)
		if gate != nil {
			select {
			case <-gate:
				return nil
			default:
			}
		}
		if !live {
			return net.ErrClosed
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return os.ErrDeadlineExceeded
		}
		select {
		case <-gate: // a nil gate never opens; read it again: Strand strands c as it opens
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// IsDown reports whether the proxy is down.
func (p *Proxy) IsDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

// Close stops listening, cuts every connection and waits for the forwarding goroutines
// to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Down()
	p.wg.Wait()
	return nil
}

// track remembers c so Down can cut it; it reports false (and closes c) while the proxy
// is down or closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down || p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.stranded, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// forward copies bytes both ways between c and a new connection to the target until
// either side closes or Down cuts them.
func (p *Proxy) forward(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	var d net.Dialer
	up, err := d.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	p.mu.Lock()
	if _, stranded := p.stranded[c]; stranded {
		p.stranded[up] = struct{}{} // stranded while up was dialled: the pair is
	}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if p.waitThawed(src, time.Time{}) != nil {
					break
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		// One side ended: end the other, so neither copy outlives the pair (one
		// waiting on a frozen connection included).
		p.untrack(dst)
		p.untrack(src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

// DialContext dials addr (which must be a loopback address) directly, not through the
// listener, and puts the connection under the proxy's switch: it fails with [ErrDown]
// while the proxy is down, and Down cuts it. Its signature is that of net.Dialer's, so
// it plugs into a client's dialer option (franz-go's kgo.Dialer, for one).
func (p *Proxy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := checkLoopback(addr); err != nil {
		return nil, err
	}
	if p.IsDown() {
		return nil, fmt.Errorf("faultproxy: dial %s: %w", addr, ErrDown)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if !p.track(c) {
		return nil, fmt.Errorf("faultproxy: dial %s: %w", addr, ErrDown)
	}
	return &trackedConn{Conn: c, p: p}, nil
}

// trackedConn forgets itself on Close, and holds its reads and writes while the proxy
// is frozen (until the deadlines the client set, as on a silent network).
type trackedConn struct {
	net.Conn
	p    *Proxy
	once sync.Once

	mu                          sync.Mutex
	readDeadline, writeDeadline time.Time
}

func (c *trackedConn) deadlines() (read, write time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readDeadline, c.writeDeadline
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		read, _ := c.deadlines()
		if werr := c.p.waitThawed(c.Conn, read); werr != nil {
			// The bytes read are dropped: the connection is cut or timed out either way.
			return 0, werr
		}
	}
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	_, write := c.deadlines()
	if err := c.p.waitThawed(c.Conn, write); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *trackedConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline, c.writeDeadline = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *trackedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *trackedConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeDeadline = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.p.mu.Lock()
		delete(c.p.conns, c.Conn)
		delete(c.p.stranded, c.Conn)
		c.p.mu.Unlock()
	})
	return err
}
