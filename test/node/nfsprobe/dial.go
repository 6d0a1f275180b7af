package main

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// dialer opens TCP connections from a source address and, when the
// process may bind one, a privileged port; it remembers the local address
// of the last connection.
type dialer struct {
	source net.IP // nil: any

	mu   sync.Mutex
	last string
}

// dial connects to addr.
func (d *dialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := sunrpc.DialReserved(ctx, d.source, addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.last = c.LocalAddr().String()
	d.mu.Unlock()
	return c, nil
}

// lastSource returns the local address of the last connection.
func (d *dialer) lastSource() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// rpcClient returns an RPC client of addr over TCP with the options'
// AUTH_SYS credential, soft: a call gives up after two tries of timeout/2.
func (p *prober) rpcClient(addr string) (*sunrpc.Client, error) {
	auth := &sunrpc.AuthSysParams{MachineName: p.o.machine, UID: p.o.uid, GID: p.o.gid}
	dial := func(ctx context.Context) (sunrpc.ClientTransport, error) {
		c, err := p.d.dial(ctx, addr)
		if err != nil {
			return nil, fmt.Errorf("dial tcp %s: %w", addr, err)
		}
		return sunrpc.NewTCPTransport(c, sunrpc.TCPOptions{}), nil
	}
	return sunrpc.NewClient(dial, sunrpc.ClientOptions{AuthSys: auth,
		Retry: sunrpc.RetryPolicy{Soft: true, Retries: 2, Timeout: p.o.timeout / 2}})
}
