package framework

import (
	"net"
	"sync"
	"testing"
)

// A Gate is a TCP proxy on loopback to a target address that can hold what
// clients send: while it is held, the bytes clients send are kept back, and
// they go on to the target, in order, when it opens. So a request can be made
// to reach kube-apiserver at a moment the test chooses, as a request sent
// just before its process was paused, or still queued when it was killed,
// reaches it late.
//
// A client that goes away while its bytes are held does not take its
// connection to the target with it: the bytes still go on when the gate
// opens, and the target's answer is read (and counted) until the target
// closes the connection or the test ends, as a request queued in the API
// server outlives the process that sent it.
type Gate struct {
	target string
	ln     net.Listener

	mu       sync.Mutex
	cond     *sync.Cond
	holding  bool
	held     int // bytes kept back now
	answered int // bytes the target has sent, in all
	conns    map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

// StartGate starts a gate, open, to target ("host:port"); it stops when the
// test ends.
func StartGate(t testing.TB, target string) *Gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	g.cond = sync.NewCond(&g.mu)
	g.wg.Add(1)
	go g.serve()
	t.Cleanup(g.close)
	return g
}

// Addr is the address clients connect to instead of the target.
func (g *Gate) Addr() string { return g.ln.Addr().String() }

// Hold keeps back what clients send from now on.
func (g *Gate) Hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holding = true
}

// Open sends on what was held, and what clients send from now on.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holding = false
	g.cond.Broadcast()
}

// Held is how many bytes clients sent that are kept back now.
func (g *Gate) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// Answered is how many bytes the target has sent its clients, in all.
func (g *Gate) Answered() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.answered
}

func (g *Gate) serve() {
	defer g.wg.Done()
	for {
		client, err := g.ln.Accept()
		if err != nil {
			return
		}
		target, err := net.Dial("tcp", g.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !g.track(client, target) {
			return
		}
		g.wg.Add(2)
		go g.forward(client, target)
		go g.answer(target, client)
	}
}

// track records the connections, unless the gate has closed (then it
// closes them).
func (g *Gate) track(conns ...net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		g.conns[c] = struct{}{}
	}
	return true
}

// forward sends what the client sends on to the target, keeping it while
// the gate is held: it reads the client all the while (so that Held counts
// all it sent) and sends in order. When the client goes away the connection
// to the target stays: answer ends it.
func (g *Gate) forward(client, target net.Conn) {
	defer g.wg.Done()
	var queue [][]byte
	eof := false
	g.wg.Add(1)
	go func() { // the reader
		defer g.wg.Done()
		for {
			buf := make([]byte, 32<<10)
			n, err := client.Read(buf)
			g.mu.Lock()
			if n > 0 {
				queue = append(queue, buf[:n])
				g.held += n
			}
			if err != nil {
				eof = true
			}
			g.cond.Broadcast()
			g.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	for {
		g.mu.Lock()
		for !g.closed && (g.holding || len(queue) == 0) && !(eof && len(queue) == 0) {
			g.cond.Wait()
		}
		if g.closed || len(queue) == 0 {
			g.mu.Unlock()
			return
		}
		chunk := queue[0]
		queue = queue[1:]
		g.held -= len(chunk)
		g.mu.Unlock()
		if _, err := target.Write(chunk); err != nil {
			return
		}
	}
}

// answer sends what the target sends back to the client, for as long as the
// client is there, counting it whether or not it is; it ends both
// connections when the target closes.
func (g *Gate) answer(target, client net.Conn) {
	defer g.wg.Done()
	defer func() {
		_ = client.Close()
		_ = target.Close()
	}()
	buf := make([]byte, 32<<10)
	clientGone := false
	for {
		n, err := target.Read(buf)
		if n > 0 {
			g.mu.Lock()
			g.answered += n
			g.mu.Unlock()
			if !clientGone {
				if _, werr := client.Write(buf[:n]); werr != nil {
					clientGone = true
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (g *Gate) close() {
	g.mu.Lock()
	g.closed = true
	g.cond.Broadcast()
	for c := range g.conns {
		_ = c.Close()
	}
	g.mu.Unlock()
	_ = g.ln.Close()
	g.wg.Wait()
}
