package mounter

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/kernelpeer"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
)

// knfsdCallbackBound is how soon after the holder's unlock a waiter of a
// knfsd export granted by callback has its lock: the guest's lockd sends
// GRANTED_MSG from its own thread through qemu's user-mode network.
const knfsdCallbackBound = 500 * time.Millisecond

// TestKnfsdNodeLockCallbacks is TestNodeLockCallbacks against Linux
// knfsd on the kernel peer (../shared/kernel-peer): three `driver mount`
// processes of the mounter mount the guest's /export (the first over
// RPC-over-RDMA with kernel siw, the others over TCP; NLM over TCP to the
// guest lockd's forwarded port). Knfsd's lockd knows every client of this
// host as one host (10.0.2.2) and sends its GRANTED_MSG callbacks to the
// one NLM service this host's rpcbind names, the mounter's: each must be
// routed to the mount whose lock it is, which answers GRANTED_RES.
func TestKnfsdNodeLockCallbacks(t *testing.T) {
	env, lockPort := kernelpeer.Lockd(t)
	testenv.NeedRootFUSE(t)
	t.Cleanup(func() { kernelpeer.Check(t) })
	dir, err := os.MkdirTemp("", "nlkp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := startNodeMounter(t, testenv.Driver(t, false), dir)
	if !kernelpeer.WaitHostNLMPort(t, s.CallbackPort(), time.Minute) {
		t.Skipf("NLM v4 is held in this host's rpcbind by another live service (port %d): the guest's callbacks would not reach this mounter", kernelpeer.HostNLMPort(t))
	}

	name := fmt.Sprintf("mounter-lock-%d", time.Now().UnixNano())
	guestDir := "/export/" + name
	kernelpeer.Sh(t, "mkdir -m 777 "+guestDir+" && cd "+guestDir+" && touch f0 f1 f2 && chmod 666 f0 f1 f2")
	t.Cleanup(func() { kernelpeer.Sh(t, "rm -rf "+guestDir) })
	common := ",mountport=" + env["KP_MOUNT_PORT"] + ",lockport=" + strconv.Itoa(lockPort) + ",soft,timeo=300,retrans=1"
	rdma := "proto=rdma,rdmadev=siw,nompacrc,port=" + env["KP_NFSRDMA_PORT"] + common
	tcp := "proto=tcp,port=" + env["KP_NFS_PORT"] + common
	mounts := mountThrough(t, s, dir, env["KP_HOST"]+":/export", []string{rdma, tcp, tcp})
	waitersGranted(t, s, mounts, name, nlm.ProcName(nlm.ProcGrantedMsg), knfsdCallbackBound)
}
