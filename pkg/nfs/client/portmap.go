package client

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// PortmapPort is rpcbind's port (RFC 1833).
const PortmapPort = sunrpc.PortmapPort

// GetPort asks the rpcbind (portmap v2) service at addr ("host:port") over
// TCP which TCP port serves prog/vers (PMAPPROC_GETPORT, RFC 1833 section
// 3.2). It returns an error wrapping ErrNotRegistered when the answer is 0,
// or the RPC error.
func GetPort(ctx context.Context, addr string, prog, vers uint32, opts sunrpc.TCPOptions) (int, error) {
	port, err := sunrpc.PortmapGetPortWith(ctx, addr, sunrpc.Mapping{Prog: prog, Vers: vers, Prot: sunrpc.IPProtoTCP}, opts)
	if err != nil {
		return 0, fmt.Errorf("nfs client: %w", err)
	}
	if port == 0 {
		return 0, fmt.Errorf("nfs client: rpcbind at %s: program %d version %d over TCP: %w", addr, prog, vers, ErrNotRegistered)
	}
	return port, nil
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
