package chaos

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// proxy is a TCP proxy between one candidate and kube-apiserver that can slow
// down or cut their network. Latency delays every chunk of bytes, in both
// directions, by that much from when it arrived; a partition holds every
// byte, and every new connection, until it heals, as a network that drops
// packets does to a TCP stream that outlives the partition (retransmissions
// deliver the bytes afterwards, late). Connections stay open across a
// partition; one that the server or the client closes is closed on the other
// side once its bytes are through.
type proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	latency time.Duration
	cut     bool
	changed chan struct{} // closed and replaced when latency or cut change
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// chunk is bytes read from one side, with the time they arrived.
type chunk struct {
	data []byte
	at   time.Time
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	return p, nil
}

// Addr is the address clients connect to instead of the target's.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// setLatency delays everything from now on (and what is held now) by d.
func (p *proxy) setLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
	p.notifyLocked()
}

// partition holds all traffic (cut true) or lets it through again (false).
func (p *proxy) partition(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	p.notifyLocked()
}

func (p *proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Close stops listening and closes every connection.
func (p *proxy) Close() {
	p.mu.Lock()
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.notifyLocked()
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *proxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.link(client) })
	}
}

// link connects client to the target and pumps bytes both ways until either
// side closes.
func (p *proxy) link(client net.Conn) {
	// A partitioned network does not even complete the connection.
	if !p.waitDeliverable(time.Time{}) {
		_ = client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client, server) {
		return
	}
	var done sync.WaitGroup
	done.Go(func() { p.pump(server, client) })
	done.Go(func() { p.pump(client, server) })
	done.Wait()
	p.untrack(client, server)
}

func (p *proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// pump copies from src to dst, each chunk once the network lets it through.
// When src ends, the chunks read are delivered and both connections closed,
// which ends the other direction's pump too.
func (p *proxy) pump(dst, src net.Conn) {
	chunks := make(chan chunk, 256)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{data: buf[:n], at: time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		_ = src.Close()
		_ = dst.Close()
		for range chunks { // let the reader finish
		}
	}()
	for c := range chunks {
		if !p.waitDeliverable(c.at) {
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			return // the other side is gone
		}
	}
}

// waitDeliverable waits until bytes that arrived at at may pass: the network
// is not cut and the latency has passed. It reports false once the proxy is
// closed.
func (p *proxy) waitDeliverable(at time.Time) bool {
	for {
		p.mu.Lock()
		closed, cut, due, changed := p.closed, p.cut, at.Add(p.latency), p.changed
		p.mu.Unlock()
		if closed {
			return false
		}
		wait := time.Until(due)
		if !cut && wait <= 0 {
			return true
		}
		if cut {
			<-changed
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// TestProxy checks the proxy's faults against an echo server: latency delays
// both ways, and a partition holds bytes, on open and on new connections,
// until it heals.
func TestProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	p, err := newProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	echo := func(c net.Conn, msg string, within time.Duration) error {
		t.Helper()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(within))
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != msg {
			t.Fatalf("echo %q, got %q", msg, buf)
		}
		return nil
	}
	held := func(c net.Conn, what string) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: read %d bytes, err %v; want the bytes held", what, n, err)
		}
	}
	readHeld := func(c net.Conn, msg string) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
			t.Fatalf("after the partition: read %q, %v; want %q", buf, err, msg)
		}
	}

	c := dial()
	defer c.Close()
	if err := echo(c, "plain", 5*time.Second); err != nil {
		t.Fatal(err)
	}

	p.setLatency(150 * time.Millisecond)
	start := time.Now()
	if err := echo(c, "slow", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("an echo took %s under 150ms of latency each way, want at least 300ms", took)
	}
	p.setLatency(0)

	p.partition(true)
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	held(c, "open connection")
	c2 := dial()
	defer c2.Close()
	if _, err := c2.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	held(c2, "new connection")
	p.partition(false)
	readHeld(c, "held")
	readHeld(c2, "new")

	p.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("read %d bytes after Close, want the connection closed", n)
	}
}
