package framework

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// echoServer answers every byte it receives with the same byte and counts
// them; it stops when the test ends.
type echoServer struct {
	ln       net.Listener
	mu       sync.Mutex
	received int
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						e.mu.Lock()
						e.received += n
						e.mu.Unlock()
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return e
}

func (e *echoServer) got() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.received
}

// until polls cond every millisecond for up to ten seconds.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("never: %s: %v", what, err)
	}
}

// TestGateHoldsAndOpens: what a client sends while the gate is held is
// counted and kept from the target, and goes on, with its answer, when the
// gate opens.
func TestGateHoldsAndOpens(t *testing.T) {
	echo := startEcho(t)
	g := StartGate(t, echo.ln.Addr().String())
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g.Hold()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	until(t, "the gate holds 5 bytes", func() bool { return g.Held() == 5 })
	if got := echo.got(); got != 0 {
		t.Fatalf("the target received %d bytes while the gate was held", got)
	}
	g.Open()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("answer %q, %v; want hello", buf, err)
	}
	if g.Held() != 0 || g.Answered() != 5 {
		t.Errorf("held %d, answered %d; want 0 and 5", g.Held(), g.Answered())
	}
}

// TestGateOutlivesItsClient: what a client sent before it went away still
// reaches the target when the gate opens, and the answer is counted.
func TestGateOutlivesItsClient(t *testing.T) {
	echo := startEcho(t)
	g := StartGate(t, echo.ln.Addr().String())
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	g.Hold()
	if _, err := c.Write([]byte("late")); err != nil {
		t.Fatal(err)
	}
	until(t, "the gate holds 4 bytes", func() bool { return g.Held() == 4 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	g.Open()
	until(t, "the target receives the held bytes", func() bool { return echo.got() == 4 })
	until(t, "the target's answer is counted", func() bool { return g.Answered() == 4 })
}
