package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/kernelpeer"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// mountKnfsdLocking mounts knfsd's /export over TCP with an NLM client
// of caller name caller, at lockPort, re-sending a blocked LOCK only
// every poll.
func mountKnfsdLocking(t *testing.T, env map[string]string, lockPort int, caller string, poll time.Duration) *Client {
	t.Helper()
	mountPort, _ := strconv.Atoi(env["KP_MOUNT_PORT"])
	nfsPort, _ := strconv.Atoi(env["KP_NFS_PORT"])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Mount(ctx, Options{
		Server: env["KP_HOST"], MountPort: mountPort, NFSPort: nfsPort, Export: "/export",
		AuthSys: sunrpc.AuthSysParams{MachineName: caller},
		Lock:    LockOptions{Port: lockPort, CallerName: caller, Poll: poll},
	})
	if err != nil {
		t.Fatal("mount knfsd:", err)
	}
	t.Cleanup(func() {
		uctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := c.Unmount(uctx); err != nil {
			t.Error("unmount:", err)
		}
	})
	return c
}

// TestKnfsdLocks locks a file of Linux knfsd's /export through the
// kernel's lockd (NLM v4 over TCP) from two mounts of this client and
// from a process in the guest: non-blocking LOCK and its conflicts (with
// the other mount and with a local fcntl lock in the guest), TEST and
// the holder it reports (the svid of the other mount, the pid of the
// guest process), blocking LOCKs completed by the guest lockd's
// GRANTED_MSG callback (after an UNLOCK of the other mount and after the
// guest process's release), a guest F_SETLKW waiting on our lock, a
// blocked LOCK cancelled (CANCEL) when its context ends, and UNLOCK: at
// the end the guest's /proc/locks holds nothing for the file.
func TestKnfsdLocks(t *testing.T) {
	env, lockPort := kernelpeer.Lockd(t)
	defer kernelpeer.Check(t)
	// blocked locks are re-sent only every 30 s, so that a wait that ends
	// sooner was ended by the GRANTED callback; every second when another
	// lock service (in this package, the NFS-Ganesha of TestMain, with
	// NLM) holds the registration the callbacks need
	poll := 30 * time.Second
	if kernelpeer.HostNLMPort(t) != 0 {
		poll = time.Second
	}
	c1 := mountKnfsdLocking(t, env, lockPort, "nfsrdma-lock-one", poll)
	c2 := mountKnfsdLocking(t, env, lockPort, "nfsrdma-lock-two", poll)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	name := fmt.Sprintf("locked-%d", time.Now().UnixNano())
	guestPath := "/export/" + name
	fh, _, err := c1.CreateFile(ctx, c1.Root(), name, 0o666, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kernelpeer.Sh(t, "rm -f "+guestPath) })
	l1, l2 := c1.Locks(), c2.Locks()
	r := func(owner uint64, pid uint32, start, end uint64, excl bool) LockRequest {
		return LockRequest{FH: fh, Owner: owner, Pid: pid, Start: start, End: end, Exclusive: excl}
	}

	// non-blocking LOCK, conflicts between the mounts, TEST
	if err := l1.Lock(ctx, r(1, 4001, 0, 99, true), false); err != nil {
		t.Fatal("LOCK:", err)
	}
	if err := l2.Lock(ctx, r(2, 4002, 50, 50, false), false); !errors.Is(err, ErrLockDenied) {
		t.Fatalf("conflicting LOCK from the other mount: %v", err)
	}
	// knfsd's lockd reports the holder's range and type, but as its svid
	// the pid of the lock's file_lock, which for a lock held by an NLM
	// client is lockd's own (Linux 6.1 nlmsvc_testlock): not 4001
	h, err := l2.Test(ctx, r(2, 4002, 0, MaxLockOffset, true))
	if err != nil || h == nil || !h.Exclusive || h.Start != 0 || h.End != 99 {
		t.Fatalf("TEST: %+v, %v", h, err)
	}
	t.Logf("TEST over mount 1's lock (svid 4001) reports svid %d", h.Svid)
	if err := l2.Lock(ctx, r(2, 4002, 100, 199, false), false); err != nil {
		t.Fatal("LOCK of the next range:", err)
	}
	// the guest sees both locks: F_GETLK there, and /proc/locks
	if got := kernelpeer.TestLock(t, guestPath, "w", 0, 1); !strings.HasPrefix(got, "held w 0 100 ") {
		t.Errorf("F_GETLK in the guest over mount 1's lock: %q", got)
	}
	if got := kernelpeer.TestLock(t, guestPath, "w", 150, 1); !strings.HasPrefix(got, "held r 100 100 ") {
		t.Errorf("F_GETLK in the guest over mount 2's read lock: %q", got)
	}
	if got := kernelpeer.TestLock(t, guestPath, "r", 150, 1); got != "free" {
		t.Errorf("F_GETLK (read) in the guest over a read lock: %q", got)
	}
	if n := len(kernelpeer.FileLocks(t, guestPath)); n != 2 {
		t.Errorf("guest /proc/locks: %d locks on the file, want 2", n)
	}

	// a lock of a process in the guest conflicts with ours, both ways
	g := kernelpeer.HoldLock(t, guestPath, "w", 200, 100, false)
	if res := g.Result(10 * time.Second); res != "locked" {
		t.Fatalf("guest F_SETLK 200..299: %q", res)
	}
	if err := l1.Lock(ctx, r(1, 4001, 250, 250, false), false); !errors.Is(err, ErrLockDenied) {
		t.Fatalf("LOCK over the guest process's lock: %v", err)
	}
	h, err = l1.Test(ctx, r(1, 4001, 200, 200, false))
	if err != nil || h == nil || !h.Exclusive || h.Start != 200 || h.End != 299 || h.Svid != int32(g.Pid) {
		t.Fatalf("TEST over the guest process's lock (pid %d): %+v, %v", g.Pid, h, err)
	}
	if got := kernelpeer.TryLock(t, guestPath, "r", 50, 1); got != "denied" {
		t.Errorf("guest F_SETLK over mount 1's lock: %q", got)
	}

	// blocking LOCK, granted at the other mount's UNLOCK: by the guest
	// lockd's GRANTED_MSG callback, or by the LOCK sent again after poll
	grantWait := poll + 10*time.Second
	ours := kernelpeer.WaitHostNLMPort(t, CallbackPort(), 0)
	got := make(chan error, 1)
	go func() { got <- l2.Lock(ctx, r(2, 4002, 0, 9, true), true) }()
	select {
	case err := <-got:
		t.Fatalf("blocking LOCK over a held range returned %v", err)
	case <-time.After(time.Second):
	}
	if err := l1.Unlock(ctx, r(1, 4001, 0, 99, false)); err != nil {
		t.Fatal("UNLOCK:", err)
	}
	waitLock(t, got, grantWait, "blocked LOCK after the other mount's UNLOCK")

	// blocking LOCK, granted when the guest process releases its lock
	go func() { got <- l1.Lock(ctx, r(1, 4001, 290, 310, true), true) }()
	select {
	case err := <-got:
		t.Fatalf("blocking LOCK over the guest's lock returned %v", err)
	case <-time.After(time.Second):
	}
	g.Release()
	waitLock(t, got, grantWait, "blocked LOCK after the guest process's release")
	kernelpeer.CheckCallbacks(t, ours, l1.Stats().Callbacks+l2.Stats().Callbacks, 2)

	// a guest F_SETLKW waits for our lock and gets it at our UNLOCK
	gw := kernelpeer.HoldLock(t, guestPath, "w", 300, 5, true)
	if res := gw.Result(time.Second); res != "" {
		t.Fatalf("guest F_SETLKW over mount 1's lock: %q", res)
	}
	if err := l1.Unlock(ctx, r(1, 4001, 290, 310, false)); err != nil {
		t.Fatal("UNLOCK:", err)
	}
	if res := gw.Result(10 * time.Second); res != "locked" {
		t.Fatalf("guest F_SETLKW after our UNLOCK: %q", res)
	}
	gw.Release()

	// CANCEL: a blocked LOCK whose context ends leaves no lock behind
	wctx, wcancel := context.WithCancel(ctx)
	go func() { got <- l1.Lock(wctx, r(1, 4001, 5, 5, true), true) }()
	time.Sleep(time.Second)
	wcancel()
	if err := <-got; !errors.Is(err, ErrLockInterrupted) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if err := l2.Unlock(ctx, r(2, 4002, 0, MaxLockOffset, false)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // lockd would grant a cancel it missed now
	if ls := kernelpeer.FileLocks(t, guestPath); len(ls) != 0 {
		t.Fatalf("after every UNLOCK and the CANCEL, the guest holds locks on the file:\n%s", strings.Join(ls, "\n"))
	}
	if h, err := l2.Test(ctx, r(9, 4009, 0, MaxLockOffset, true)); err != nil || h != nil {
		t.Fatalf("after every unlock, TEST finds %+v, %v", h, err)
	}
	if got := kernelpeer.TryLock(t, guestPath, "w", 0, 0); got != "locked" {
		t.Fatalf("guest F_SETLK of the whole file at the end: %q", got)
	}
}

// waitLock waits for a blocked Lock's result: nil within d.
func waitLock(t *testing.T, got chan error, d time.Duration, what string) {
	t.Helper()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(what+":", err)
		}
	case <-time.After(d):
		t.Fatalf("%s: not granted within %v (NLM v4 is registered with this host's rpcbind at port %d, the callback service's is %d)", what, d, kernelpeer.HostNLMPort(t), CallbackPort())
	}
}
