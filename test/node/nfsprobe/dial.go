package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// Privileged source ports, tried from the highest down, as Linux's RPC
// client does (sunrpc.min_resvport, max_resvport).
const (
	minResvPort = 665
	maxResvPort = 1023
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
	c, err := d.dialResv(ctx, addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.last = c.LocalAddr().String()
	d.mu.Unlock()
	return c, nil
}

// dialResv tries the privileged ports from maxResvPort down; when binding
// one is not permitted, or every one is taken, it dials from any port.
func (d *dialer) dialResv(ctx context.Context, addr string) (net.Conn, error) {
ports:
	for p := maxResvPort; p >= minResvPort; p-- {
		nd := net.Dialer{LocalAddr: &net.TCPAddr{IP: d.source, Port: p}}
		c, err := nd.DialContext(ctx, "tcp", addr)
		switch {
		case err == nil:
			return c, nil
		case errors.Is(err, syscall.EADDRINUSE), errors.Is(err, syscall.EADDRNOTAVAIL) && d.source == nil:
			continue // the port is taken: the next one
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
			break ports // no privileged port for this process
		default:
			return nil, err
		}
	}
	var la net.Addr
	if d.source != nil {
		la = &net.TCPAddr{IP: d.source}
	}
	nd := net.Dialer{LocalAddr: la}
	return nd.DialContext(ctx, "tcp", addr)
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
