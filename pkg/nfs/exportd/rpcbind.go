package exportd

import (
	"context"
	"net"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// portOf is l's TCP port; 0 when l is nil.
func portOf(l interface{ Addr() net.Addr }) int {
	if l == nil {
		return 0
	}
	if a, ok := l.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// addrOf is l's address; nil when l is nil.
func addrOf(l net.Listener) net.Addr {
	if l == nil {
		return nil
	}
	return l.Addr()
}

// registerRPCBind registers the server's programs over TCP with the local
// rpcbind if one answers, and returns what undoes it. Ports 0 (unknown)
// are not registered.
func registerRPCBind(ctx context.Context, nfsPort, mntPort, nlmPort, nsmPort int) func() {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sunrpc.PortmapPort))
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		klog.V(1).InfoS("nfs server: no local rpcbind; not registering", "addr", addr, "err", err)
		return func() {}
	}
	c.Close()
	var maps []sunrpc.Mapping
	for _, p := range []struct {
		prog, vers uint32
		port       int
	}{
		{nfs3.Program, nfs3.Version, nfsPort},
		{mount3.Program, mount3.Version, mntPort},
		{nlm.Program, nlm.Version, nlmPort},
		{nsm.Program, nsm.Version, nsmPort},
	} {
		if p.port > 0 {
			maps = append(maps, sunrpc.Mapping{Prog: p.prog, Vers: p.vers, Prot: sunrpc.IPProtoTCP, Port: uint32(p.port)})
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	unregister, err := server.RegisterRPCBind(rctx, addr, maps)
	if err != nil {
		klog.InfoS("nfs server: rpcbind registration incomplete", "err", err)
	} else {
		klog.InfoS("nfs server: registered with rpcbind", "addr", addr, "programs", len(maps))
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		unregister(uctx)
	}
}
