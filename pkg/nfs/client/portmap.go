package client

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Portmap version 2 (RFC 1833 section 3).
const (
	PortmapProgram = 100000
	PortmapVersion = 2
	PortmapPort    = 111
	pmapGetPort    = 3 // PMAPPROC_GETPORT
	ipprotoTCP     = 6
)

// GetPort asks the rpcbind (portmap v2) service at addr ("host:port") over
// TCP which TCP port serves prog/vers (PMAPPROC_GETPORT, RFC 1833 section
// 3.2). It returns an error wrapping ErrNotRegistered when the answer is 0,
// or the RPC error.
func GetPort(ctx context.Context, addr string, prog, vers uint32, opts sunrpc.TCPOptions) (int, error) {
	c, err := sunrpc.NewClient(sunrpc.TCPDialer(addr, opts), sunrpc.ClientOptions{Retry: sunrpc.RetryPolicy{Soft: true, Retries: 2}})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var port uint32
	err = c.Call(ctx, sunrpc.CallSpec{
		Prog: PortmapProgram, Vers: PortmapVersion, Proc: pmapGetPort,
		Args: func(b *sunrpc.Builder) {
			b.Uint32(prog)
			b.Uint32(vers)
			b.Uint32(ipprotoTCP)
			b.Uint32(0)
		},
		Results: func(d *xdr.Decoder, _ int) error {
			port = d.Uint32()
			return d.Err()
		},
		MaxReplySize: 64,
	})
	if err != nil {
		return 0, fmt.Errorf("nfs client: rpcbind GETPORT %d/%d at %s: %w", prog, vers, addr, err)
	}
	if port == 0 || port > 65535 {
		return 0, fmt.Errorf("nfs client: rpcbind at %s: program %d version %d over TCP: %w (port %d)", addr, prog, vers, ErrNotRegistered, port)
	}
	return int(port), nil
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
