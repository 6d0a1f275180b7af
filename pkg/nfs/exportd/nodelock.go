package exportd

import (
	"context"
	"net"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// claimLockPrograms frees NLM v4 and NSM v1 in the local rpcbind for
// this server's registration when the node's lock callback service
// (package lockcb, listening at socket) holds them: this server's clients
// must find its lock service there, and the callbacks meant for the
// node's mounts reach the node's service through this server's relay
// (lockd.Options.NodeCallbacks). The node's service leaves a live
// registration alone, so it does not take them back while this server
// runs. Nothing is done when socket is "" or no service answers there.
func claimLockPrograms(ctx context.Context, socket string, nlmPort, nsmPort int) {
	if socket == "" {
		return
	}
	c, err := net.DialTimeout("unixpacket", socket, time.Second)
	if err != nil {
		return
	}
	c.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sunrpc.PortmapPort))
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, p := range []struct {
		prog, vers uint32
		port       int
	}{{nlm.Program, nlm.Version, nlmPort}, {nsm.Program, nsm.Version, nsmPort}} {
		m := sunrpc.Mapping{Prog: p.prog, Vers: p.vers, Prot: sunrpc.IPProtoTCP}
		cur, err := sunrpc.PortmapGetPort(ctx, addr, m)
		if err != nil || cur == 0 || cur == p.port {
			continue
		}
		if err := sunrpc.PortmapUnset(ctx, addr, m); err == nil {
			klog.InfoS("nfs server: taking the lock program's registration from the node's lock callback service; callbacks for the node's mounts are relayed to it",
				"program", p.prog, "version", p.vers, "was", cur, "socket", socket)
		}
	}
}
