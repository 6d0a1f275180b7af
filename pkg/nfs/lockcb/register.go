package lockcb

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// DefaultRPCBind is the node's rpcbind (RFC 1833), where servers look for
// a client's NLM and NSM services.
const DefaultRPCBind = "127.0.0.1:111"

// Register registers prog/vers over TCP at port with the rpcbind at
// rpcbind and reports whether the mapping is ours. A registration held by
// a port that does not accept connections (a process that died without
// unregistering) is replaced; one held by a live service (a lock server
// of this host, another callback service) is left alone.
func Register(rpcbind string, prog, vers uint32, port int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	m := sunrpc.Mapping{Prog: prog, Vers: vers, Prot: sunrpc.IPProtoTCP, Port: uint32(port)}
	if cur, err := sunrpc.PortmapGetPort(ctx, rpcbind, m); err == nil && cur == port {
		return true
	}
	err := sunrpc.PortmapSet(ctx, rpcbind, m)
	if err == nil {
		return true
	}
	if !errors.Is(err, sunrpc.ErrPortmapRefused) {
		klog.V(1).InfoS("no local rpcbind for the callback service", "rpcbind", rpcbind, "err", err)
		return false
	}
	cur, err := sunrpc.PortmapGetPort(ctx, rpcbind, sunrpc.Mapping{Prog: prog, Vers: vers, Prot: sunrpc.IPProtoTCP})
	if err == nil && cur == port {
		return true
	}
	if err == nil && cur != 0 {
		host, _, _ := net.SplitHostPort(rpcbind)
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(cur)), time.Second); err == nil {
			c.Close()
			klog.V(1).InfoS("callback program registered by another service", "program", prog, "version", vers, "port", cur)
			return false
		}
	}
	if err := sunrpc.PortmapUnset(ctx, rpcbind, m); err != nil {
		return false
	}
	return sunrpc.PortmapSet(ctx, rpcbind, m) == nil
}

// Unregister removes the mapping of prog/vers from the rpcbind at rpcbind
// if it is still port's: one another service made meanwhile (after
// replacing ours) is left alone, as portmap's UNSET removes a program's
// mapping whatever its port.
func Unregister(rpcbind string, prog, vers uint32, port int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	m := sunrpc.Mapping{Prog: prog, Vers: vers, Prot: sunrpc.IPProtoTCP}
	if cur, err := sunrpc.PortmapGetPort(ctx, rpcbind, m); err == nil && cur != port {
		klog.V(1).InfoS("callback program registered by another service now; not unregistering it", "program", prog, "version", vers, "port", cur)
		return
	}
	_ = sunrpc.PortmapUnset(ctx, rpcbind, m)
}
