package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards the TCP connections it accepts on a loopback port to a
// target address, for tests that cut connections (Kill: a network failure
// or a server restart) or look at the bytes on the wire (a Pump).
type Proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// Pump copies one direction of a proxied connection, from src to dst;
// toTarget says which (client to target, or back). It returns when src
// ends or dst fails; the proxy then closes dst.
type Pump func(dst io.Writer, src io.Reader, toTarget bool)

// NewProxy listens on 127.0.0.1 and forwards each connection to target,
// copying with pump (io.Copy when nil). The test's cleanup stops it and
// closes every connection.
func NewProxy(t testing.TB, target string, pump Pump) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if pump == nil {
		pump = func(dst io.Writer, src io.Reader, _ bool) { _, _ = io.Copy(dst, src) }
	}
	p := &Proxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			a, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				a.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, a, b)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); pump(b, a, true); b.Close() }()
			go func() { defer p.wg.Done(); pump(a, b, false); a.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.Kill(); p.wg.Wait() })
	return p
}

// Addr is the proxy's "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Kill closes every connection proxied so far; new ones are still
// accepted.
func (p *Proxy) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TCPPair returns the two ends of a new TCP connection over 127.0.0.1;
// the test's cleanup closes both.
func TCPPair(t testing.TB) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		c.Close()
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}
