package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockcb"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// TestGaneshaLocksNodeMonitor is TestGaneshaLocks while the node's lock
// callback service (package lockcb, as the mounter runs it) holds NSM in
// this host's rpcbind: Ganesha's NLM monitors each client through it
// (SM_MON, answered stat_succ), so its locks work. Skipped when another
// live service holds NSM there. It comes before TestGaneshaLocks: Ganesha
// monitors a client address once (NSM_Use_Caller_Name off), so its SM_MON
// for 127.0.0.1 reaches the status monitor holding NSM the first time.
func TestGaneshaLocksNodeMonitor(t *testing.T) {
	needGanesha(t)
	s := &lockcb.Service{Socket: filepath.Join(t.TempDir(), "lockd.sock"), RPCBind: CallbackRPCBind}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error("lockcb:", err)
		}
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatal("lockcb:", err)
	}
	held := func() (int, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		p, err := sunrpc.PortmapGetPort(ctx, CallbackRPCBind, sunrpc.Mapping{Prog: nsm.Program, Vers: nsm.Version, Prot: sunrpc.IPProtoTCP})
		return p, err == nil && p == s.Port()
	}
	if !testenv.WaitFor(3*time.Second, func() bool { _, ok := held(); return ok }) {
		p, _ := held()
		t.Skipf("another live service holds NSM in the rpcbind at %s (port %d): the node service cannot take it", CallbackRPCBind, p)
	}
	ganeshaLocks(t, func() {
		// Ganesha names a client by its address unless told to use
		// caller names (NSM_Use_Caller_Name)
		testenv.Eventually(t, 10*time.Second, "Ganesha's SM_MON recorded by the node's status monitor", func() bool {
			for _, r := range s.Monitor().Monitors() {
				if (r.MonName == "127.0.0.1" || r.MonName == "client-one") && r.MyID.MyProg == nlm.Program {
					return true
				}
			}
			return false
		})
		t.Logf("monitors: %+v", s.Monitor().Monitors())
	})
}

// TestGaneshaLocks locks through NFS-Ganesha's NLM v4 service
// (Enable_NLM = true), found through rpcbind: two clients of one file
// exclude each other, TEST reports the holder, a blocked lock completes
// when the holder unlocks (by GRANTED, or by re-sending the LOCK when
// Ganesha's callback cannot reach us), a cancelled wait leaves nothing.
func TestGaneshaLocks(t *testing.T) { ganeshaLocks(t, nil) }

// ganeshaLocks runs the locks of TestGaneshaLocks; monitored, when not
// nil, runs after the first lock is held.
func ganeshaLocks(t *testing.T, monitored func()) {
	g := needGanesha(t)
	if g.NLMPort == 0 {
		t.Fatal("Ganesha runs without NLM")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mount := func(caller string) *Client {
		o := mountOpts(g, 0, 0)
		o.Lock = LockOptions{CallerName: caller, Poll: 200 * time.Millisecond}
		c, err := Mount(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.Unmount(uctx); err != nil {
				t.Error(err)
			}
		})
		return c
	}
	c1, c2 := mount("client-one"), mount("client-two")
	res, err := c1.Create(ctx, c1.Root(), fmt.Sprintf("locked-%d", os.Getpid()), nfs3.CreateHow{Mode: nfs3.Unchecked})
	if err != nil || !res.Obj.Set {
		t.Fatalf("CREATE: %+v, %v", res, err)
	}
	fh := res.Obj.FH
	l1, l2 := c1.Locks(), c2.Locks()
	r := func(owner uint64, pid uint32, start, end uint64, excl bool) LockRequest {
		return LockRequest{FH: fh, Owner: owner, Pid: pid, Start: start, End: end, Exclusive: excl}
	}
	if err := l1.Lock(ctx, r(1, 3001, 0, 99, true), false); err != nil {
		t.Fatal("LOCK:", err)
	}
	if monitored != nil {
		monitored()
	}
	if err := l2.Lock(ctx, r(2, 3002, 50, 50, false), false); !errors.Is(err, ErrLockDenied) {
		t.Fatalf("conflicting LOCK: %v", err)
	}
	h, err := l2.Test(ctx, r(2, 3002, 0, MaxLockOffset, true))
	if err != nil || h == nil || h.Svid != 3001 || !h.Exclusive || h.Start != 0 || h.End != 99 {
		t.Fatalf("TEST: %+v, %v", h, err)
	}
	if err := l2.Lock(ctx, r(2, 3002, 100, 199, true), false); err != nil {
		t.Fatal("LOCK of the next range:", err)
	}

	// blocked, then granted at the unlock
	got := make(chan error, 1)
	go func() { got <- l2.Lock(ctx, r(2, 3002, 0, 9, true), true) }()
	select {
	case err := <-got:
		t.Fatalf("blocking LOCK over a held range returned %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := l1.Unlock(ctx, r(1, 3001, 0, 99, false)); err != nil {
		t.Fatal("UNLOCK:", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal("blocked LOCK:", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("blocked LOCK not granted after the unlock")
	}
	t.Logf("lock stats: %+v", l2.Stats())

	// a cancelled wait leaves no lock behind
	wctx, wcancel := context.WithCancel(ctx)
	go func() { got <- l1.Lock(wctx, r(1, 3001, 5, 5, true), true) }()
	time.Sleep(500 * time.Millisecond)
	wcancel()
	if err := <-got; !errors.Is(err, ErrLockInterrupted) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if err := l2.Unlock(ctx, r(2, 3002, 0, MaxLockOffset, false)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if h, err := l2.Test(ctx, r(9, 3009, 0, MaxLockOffset, true)); err != nil || h != nil {
		t.Fatalf("after every unlock, TEST finds %+v, %v", h, err)
	}
}
