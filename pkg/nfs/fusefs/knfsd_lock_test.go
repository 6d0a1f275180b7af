package fusefs

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/kernelpeer"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

// TestKnfsdLocksOverTCP and TestKnfsdLocksOverRDMA: processes lock a
// file of Linux knfsd's /export (../shared/kernel-peer) through two FUSE
// mounts (the first over proto, the second over TCP; NLM over TCP to the
// kernel's lockd, lockport= its forwarded port) and a process in the
// guest locks it directly: see testKnfsdLocks.
func TestKnfsdLocksOverTCP(t *testing.T) { testKnfsdLocks(t, mountopts.ProtoTCP) }

// TestKnfsdLocksOverRDMA is TestKnfsdLocksOverTCP with the first mount's
// NFS over RPC-over-RDMA (kernel siw, MPA CRC off as in
// TestKnfsdMountOverRDMA).
func TestKnfsdLocksOverRDMA(t *testing.T) { testKnfsdLocks(t, mountopts.ProtoRDMA) }

// testKnfsdLocks: fcntl locks of processes on two mounts exclude each
// other through knfsd's lockd (F_SETLK refused, F_GETLK's type and
// range), and exclude a process's fcntl lock in the guest both ways
// (F_GETLK on either side reports the other's type and range); a blocked
// F_SETLKW is granted when the other mount's process unlocks (by the
// guest lockd's GRANTED_MSG callback, see kernelpeer.CheckCallbacks) and
// when the guest process releases its lock; a guest F_SETLKW waits for a
// mount's lock; a signal ends a blocked F_SETLKW with EINTR and leaves no
// lock or request on the server; flock(2) on a mount is a whole-file lock
// that the guest sees; close releases, and at the end the guest's
// /proc/locks has nothing for the file.
func testKnfsdLocks(t *testing.T, proto string) {
	env, lockPort := kernelpeer.Lockd(t)
	needFUSE(t)
	needPython(t)
	t.Cleanup(func() { kernelpeer.Check(t) })
	freeNLM := kernelpeer.WaitHostNLMPort(t, 0, time.Minute)

	name := fmt.Sprintf("fusefs-lock-%s-%d", proto, time.Now().UnixNano())
	guestDir := "/export/" + name
	kernelpeer.Sh(t, "mkdir -m 777 "+guestDir+" && head -c 1000 /dev/zero > "+guestDir+"/f && chmod 666 "+guestDir+"/f")
	t.Cleanup(func() { kernelpeer.Sh(t, "rm -rf "+guestDir) })
	gf := guestDir + "/f"
	// a blocked LOCK is sent again only every 30 s: the waits below end
	// by the GRANTED callback, or by that polling when the callback goes
	// to another lock service of this host (see kernelpeer.CheckCallbacks)
	const poll = 30 * time.Second
	d1, m1 := mountKnfsdLocking(t, env, proto, lockPort, "fusefs-lock-one", poll)
	m2dir, m2 := mountKnfsdLocking(t, env, mountopts.ProtoTCP, lockPort, "fusefs-lock-two", poll)
	p1 := startLockProc(t, "p1", filepath.Join(d1, name, "f"))
	p2 := startLockProc(t, "p2", filepath.Join(m2dir, name, "f"))

	// conflicts between the mounts
	p1.must("setlk w 0 10", "ok")
	p2.must("setlk w 5 1", "err EAGAIN")
	p2.must("setlk r 9 1", "err EAGAIN")
	p2.must("setlk w 10 10", "ok")
	// knfsd reports the pid of the lock's file_lock, lockd's own for a
	// lock of an NLM client: the type and range are what tell
	if got := p2.do("getlk w 0 0"); !strings.HasPrefix(got, "lock w 0 10 ") {
		t.Fatalf("F_GETLK over the other mount's lock: %q", got)
	}
	p2.must("setlk u 10 10", "ok")

	// a lock of a process in the guest, both ways
	g := kernelpeer.HoldLock(t, gf, "w", 100, 10, false)
	if res := g.Result(10 * time.Second); res != "locked" {
		t.Fatalf("guest F_SETLK 100..109: %q", res)
	}
	p1.must("setlk w 105 1", "err EAGAIN")
	// the server reports the guest process's pid as the holder's svid,
	// but FUSE maps a GETLK pid into this host's pid namespace: 0 when
	// no process of this host has that number
	if got := p1.do("getlk r 0 200"); !strings.HasPrefix(got, "lock w 100 10 ") {
		t.Fatalf("F_GETLK over the guest process's lock: %q", got)
	}
	if got := kernelpeer.TryLock(t, gf, "r", 5, 1); got != "denied" {
		t.Fatalf("guest F_SETLK over mount 1's lock: %q", got)
	}

	// blocked F_SETLKW, granted at the other mount's unlock
	callbacksOurs := freeNLM && kernelpeer.WaitHostNLMPort(t, client.CallbackPort(), 0)
	grantWait := poll + 10*time.Second
	p2.send("setlkw w 0 5")
	if a, ok := p2.answer(500 * time.Millisecond); ok {
		t.Fatalf("F_SETLKW over a held lock answered %q", a)
	}
	p1.must("setlk u 0 10", "ok")
	if a, ok := p2.answer(grantWait); !ok || a != "ok" {
		t.Fatalf("blocked F_SETLKW after the unlock: %q %v", a, ok)
	}
	// blocked F_SETLKW, granted at the guest process's release
	p1.send("setlkw w 100 1")
	if a, ok := p1.answer(500 * time.Millisecond); ok {
		t.Fatalf("F_SETLKW over the guest's lock answered %q", a)
	}
	g.Release()
	if a, ok := p1.answer(grantWait); !ok || a != "ok" {
		t.Fatalf("blocked F_SETLKW after the guest's release: %q %v", a, ok)
	}
	kernelpeer.CheckCallbacks(t, callbacksOurs, m1.Client.Locks().Stats().Callbacks+m2.Client.Locks().Stats().Callbacks, 2)

	// a guest F_SETLKW waits for a mount's lock
	gw := kernelpeer.HoldLock(t, gf, "w", 0, 1, true)
	if res := gw.Result(time.Second); res != "" {
		t.Fatalf("guest F_SETLKW over mount 2's lock: %q", res)
	}
	p2.must("setlk u 0 5", "ok")
	if res := gw.Result(10 * time.Second); res != "locked" {
		t.Fatalf("guest F_SETLKW after mount 2's unlock: %q", res)
	}
	gw.Release()

	// a signal ends a blocked F_SETLKW, leaving nothing behind
	p2.must("setlkw w 100 1 1", "err EINTR") // p1 holds 100; SIGALRM after 1 s
	p1.must("setlk u 100 1", "ok")
	time.Sleep(500 * time.Millisecond) // a CANCEL lockd missed would grant now
	if got := kernelpeer.TestLock(t, gf, "w", 0, 0); got != "free" {
		t.Fatalf("after the unlocks and the interrupted F_SETLKW the guest finds %q", got)
	}

	// flock(2) on a mount is a whole-file lock on the server
	p1.must("flock ex nb", "ok")
	if got := kernelpeer.TryLock(t, gf, "r", 500, 1); got != "denied" {
		t.Fatalf("guest F_SETLK under mount 1's flock: %q", got)
	}
	p2.must("flock sh nb", "err EAGAIN")
	p1.must("close", "ok")
	p2.must("close", "ok")
	deadline := time.Now().Add(10 * time.Second)
	for {
		ls := kernelpeer.FileLocks(t, gf)
		if len(ls) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("locks left in the guest after every close:\n%s", strings.Join(ls, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// mountKnfsdLocking mounts the kernel peer's /export with FUSE over proto,
// NLM at lockPort under caller name caller, a blocked LOCK sent again
// every poll, and returns the mount point and the mount.
func mountKnfsdLocking(t *testing.T, env map[string]string, proto string, lockPort int, caller string, poll time.Duration) (string, *Mount) {
	t.Helper()
	return fuseMountKnfsd(t, env, proto, ",lockport="+strconv.Itoa(lockPort), nil, caller, func(o *client.Options) { o.Lock.Poll = poll })
}
