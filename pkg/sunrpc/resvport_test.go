package sunrpc

import (
	"context"
	"net"
	"os"
	"testing"
	"time"
)

// As root, DialReserved takes its source port from the reserved range,
// the highest free one first; the listener sees that port.
func TestDialReserved(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (binding a port below 1024)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	prev := MaxResvPort + 1
	for range 2 {
		c, err := DialReserved(ctx, net.ParseIP("127.0.0.1"), l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		port := c.LocalAddr().(*net.TCPAddr).Port
		if port < MinResvPort || port >= prev {
			t.Fatalf("source port %d, want a reserved one below %d", port, prev)
		}
		prev = port
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if got := s.RemoteAddr().(*net.TCPAddr).Port; got != port {
			t.Errorf("the listener sees port %d, the dialer %d", got, port)
		}
		s.Close()
	}
	// a source address this host does not have
	if _, err := DialReserved(ctx, net.ParseIP("192.0.2.200"), l.Addr().String()); err == nil {
		t.Error("dialed from an address this host does not have")
	}
}
