package kernelpeer

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// Lockd readies the peer for NLM v4 clients of this host (the guest's
// knfsd lockd, X/Open XNFS chapter 10) and returns the peer's env (Env
// with KP_NFS_PORT) and the host port forwarded to the guest lockd's TCP
// port. It starts rpc.statd in the guest (StartStatd: knfsd's lockd
// monitors every client before it grants it a lock) and makes sure this
// host runs an rpcbind (testenv.NeedRPCBind): a lock client's callback
// service registers there, and the guest's lockd finds it by asking the
// rpcbind at the caller's address, 10.0.2.2, which qemu's user-mode
// network maps to this host's 127.0.0.1. It skips t (fails it under
// CI=true) as Env, StartStatd and NeedRPCBind do.
func Lockd(t testing.TB) (env map[string]string, lockPort int) {
	t.Helper()
	env = Env(t, "KP_NFS_PORT")
	testenv.NeedRPCBind(t)
	StartStatd(t)
	return env, Forward(t, GuestPort(t, nlm.Program, nlm.Version))
}

// HostNLMPort returns the port at which NLM v4 over TCP is registered
// with this host's rpcbind (testenv.RPCBindAddr), 0 when it is not: the
// service the guest's lockd sends its GRANTED callbacks to.
func HostNLMPort(t testing.TB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	p, err := sunrpc.PortmapGetPort(ctx, testenv.RPCBindAddr, sunrpc.Mapping{Prog: nlm.Program, Vers: nlm.Version, Prot: sunrpc.IPProtoTCP})
	if err != nil {
		t.Fatal("rpcbind:", err)
	}
	return p
}

// WaitHostNLMPort waits up to d until HostNLMPort is port (0: NLM not
// registered) and reports whether it is. Another lock service of this
// host (the kernel's lockd while the host has a kernel NFS mount, an
// export server, another test process) may hold the registration for a
// while; the guest lockd's GRANTED callbacks then go to it, and a
// blocked lock completes only when its LOCK is sent again.
func WaitHostNLMPort(t testing.TB, port int, d time.Duration) bool {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(500 * time.Millisecond) {
		got := HostNLMPort(t)
		if got == port {
			return true
		}
		if time.Now().After(deadline) {
			t.Logf("NLM v4 is registered with this host's rpcbind at port %d, not %d: another lock service holds the registration", got, port)
			return false
		}
	}
}

// CheckCallbacks checks that the guest lockd's GRANTED callbacks
// completed want blocked locks (n did). Knfsd's lockd keeps one client
// host per address (every client on this host is 10.0.2.2 to it,
// whatever its caller_name), finds its callback service through this
// host's rpcbind and keeps that binding and its connection for a while:
// when another lock service of this host held the registration then, the
// callbacks go there and the locks complete by polling. That fails t only
// under CI=true when the test's process held the registration
// (registered).
func CheckCallbacks(t testing.TB, registered bool, n, want uint64) {
	t.Helper()
	switch {
	case n == want:
		t.Logf("%d blocked locks completed by the GRANTED callback", n)
	case os.Getenv("CI") == "true" && registered:
		t.Errorf("%d blocked locks completed by the GRANTED callback, want %d (this process registered with rpcbind: %v)", n, want, registered)
	default:
		t.Logf("%d of %d blocked locks completed by the GRANTED callback, the others by polling: this process registered with rpcbind: %v; the callbacks went to another lock service of this host", n, want, registered)
	}
}
