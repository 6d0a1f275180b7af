package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/kernelpeer"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockd"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// TestKernelClientLocks: the Linux NFS client of the kernel peer mounts
// our export server over TCP without nolock and takes fcntl locks through
// the server's NLM service (which it finds through the rpcbind at the
// server's address, 10.0.2.2:111, that is this host's rpcbind) while our
// own client on this host holds locks on the same file: each side's
// F_SETLK and LOCK are refused over the other's lock, F_GETLK in the
// guest reports our lock's type and range, and our TEST reports the
// guest's; the server's lock table shows the guest's lock under the
// guest's caller_name. A guest F_SETLKW over our lock is granted after
// our UNLOCK, and our blocked LOCK over the guest's lock after the guest
// process releases it.
//
// The server's GRANTED callback to the guest cannot arrive: the guest's
// calls reach the server from 127.0.0.1 (qemu's user-mode network), so
// the server asks this host's rpcbind for the caller's NLM service and
// finds itself, never the guest's lockd. The guest's F_SETLKW completes
// when its kernel sends the blocked LOCK again (every 30 s, Linux
// NLMCLNT_POLL_TIMEOUT).
func TestKernelClientLocks(t *testing.T) { testKernelClientLocks(t, "tcp") }

// TestKernelClientLocksOverRDMA is TestKernelClientLocks with the guest's
// NFS over RPC-over-RDMA (kernel siw to our siw); its NLM is over TCP.
func TestKernelClientLocksOverRDMA(t *testing.T) { testKernelClientLocks(t, "rdma") }

func testKernelClientLocks(t *testing.T, proto string) {
	kernelpeer.Env(t, "KP_NFS_PORT")
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	rpcbind := testenv.NeedRPCBind(t)
	kernelpeer.StartStatd(t)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "f"), make([]byte, 1000), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	// the NLM port of a client, as the server looks it up for GRANTED:
	// through the rpcbind at the client's address unless guestNLM is set
	var guestNLM atomic.Int32
	lookup := func(ctx context.Context, host string, prog, vers uint32) (int, error) {
		if p := guestNLM.Load(); p != 0 && prog == nlm.Program {
			return int(p), nil
		}
		return lockd.RPCBindPort(ctx, host, prog, vers)
	}
	srv, err := New(Options{Root: root, Exports: []Export{{Path: "/"}}, Locks: lockd.Options{LookupPort: lookup}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	nl, ml, ll, sl := listen(), listen(), listen(), listen()
	port := func(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 3)
	go func() { done <- srv.Serve(ctx, nl, ml) }()
	go func() { done <- srv.ServeLocks(ctx, ll, sl) }()
	servers := 2
	nfsOpts := fmt.Sprintf("proto=tcp,port=%d", port(nl))
	if proto == "rdma" {
		rl := listen()
		rdmaAddr := rl.Addr().String()
		rl.Close()
		servers++
		go func() {
			done <- serveRDMA(ctx, srv, siw.NewDevice(siw.Config{}), rdmaAddr, rpcrdma.ServerOptions{Credits: 16})
		}()
		_, rport, _ := net.SplitHostPort(rdmaAddr)
		nfsOpts = "proto=rdma,port=" + rport
	}
	defer func() {
		cancel()
		for range servers {
			<-done
		}
	}()
	defer func() {
		time.Sleep(300 * time.Millisecond)
		kernelpeer.Check(t)
	}()

	// the guest's lockd finds our NLM through this host's rpcbind
	nlmMap := sunrpc.Mapping{Prog: nlm.Program, Vers: nlm.Version, Prot: sunrpc.IPProtoTCP, Port: uint32(port(ll))}
	var unregister func(context.Context)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
		unregister, err = RegisterRPCBind(rctx, rpcbind, []sunrpc.Mapping{nlmMap})
		rcancel()
		if err == nil {
			break
		}
		unregister(context.Background())
		if time.Now().After(deadline) {
			t.Fatalf("NLM v4 stays registered with this host's rpcbind by another service: %v", err)
		}
	}
	defer unregister(context.Background())

	mnt := fmt.Sprintf("/mnt/ours-lock-%d", time.Now().UnixNano())
	kernelpeer.Sh(t, fmt.Sprintf("mkdir -p %s && timeout 40 mount -t nfs -o vers=3,%s,mountport=%d,mountproto=tcp 10.0.2.2:/ %s",
		mnt, nfsOpts, port(ml), mnt))
	defer kernelpeer.Sh(t, fmt.Sprintf("umount -f %s 2>/dev/null; rmdir %s; true", mnt, mnt))
	if opts := kernelpeer.Sh(t, "grep ' "+mnt+" ' /proc/mounts"); strings.Contains(opts, "nolock") || strings.Contains(opts, "local_lock=all") {
		t.Fatalf("the guest's mount keeps its locks local: %s", opts)
	}
	gf := mnt + "/f"

	// our client on this host, on the same file
	c, err := client.Mount(ctx, client.Options{
		Server: "127.0.0.1", NFSPort: port(nl), MountPort: port(ml), Export: "/",
		AuthSys: sunrpc.AuthSysParams{MachineName: "nfsrdma-host"},
		Lock:    client.LockOptions{Port: port(ll), CallerName: "nfsrdma-host", Poll: 500 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		uctx, ucancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ucancel()
		if err := c.Unmount(uctx); err != nil {
			t.Error(err)
		}
	}()
	lk, err := c.Lookup(ctx, c.Root(), "f")
	if err != nil {
		t.Fatal(err)
	}
	fh := lk.Object
	key, st := srv.lockKey(fh.Bytes(), &sunrpc.Request{Peer: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}})
	if st != nlm.Granted {
		t.Fatal("lock key:", st)
	}
	l := c.Locks()
	r := func(start, end uint64, excl bool) client.LockRequest {
		return client.LockRequest{FH: fh, Owner: 1, Pid: 4001, Start: start, End: end, Exclusive: excl}
	}
	lctx, lcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer lcancel()

	// our lock refuses the guest's F_SETLK; F_GETLK there reports it
	if err := l.Lock(lctx, r(0, 99, true), false); err != nil {
		t.Fatal("LOCK:", err)
	}
	if got := kernelpeer.TryLock(t, gf, "w", 50, 1); got != "denied" {
		t.Fatalf("guest F_SETLK over our lock: %q", got)
	}
	// Linux reports a remote holder's svid negated as its pid
	if got := kernelpeer.TestLock(t, gf, "r", 0, 0); got != "held w 0 100 -4001" {
		t.Fatalf("guest F_GETLK over our lock: %q", got)
	}
	if got := kernelpeer.TryLock(t, gf, "w", 100, 10); got != "locked" {
		t.Fatalf("guest F_SETLK next to our lock: %q", got)
	}

	// the guest's lock refuses our LOCK; TEST reports it
	g := kernelpeer.HoldLock(t, gf, "w", 200, 100, false)
	if res := g.Result(20 * time.Second); res != "locked" {
		t.Fatalf("guest F_SETLK 200..299: %q", res)
	}
	var guestHeld []lockd.Held
	for _, h := range srv.Locks().Held(key) {
		if h.Owner.Caller != "nfsrdma-host" {
			guestHeld = append(guestHeld, h)
		}
	}
	if len(guestHeld) != 1 || guestHeld[0].Owner.Caller != "kernel-peer" || guestHeld[0].Range.Start != 200 || guestHeld[0].Range.End != 299 || !guestHeld[0].Exclusive {
		t.Fatalf("the server's locks of the guest: %+v", guestHeld)
	}
	if err := l.Lock(lctx, r(250, 250, false), false); !errors.Is(err, client.ErrLockDenied) {
		t.Fatalf("our LOCK over the guest's lock: %v", err)
	}
	h, err := l.Test(lctx, r(0, client.MaxLockOffset, true))
	if err != nil || h == nil || !h.Exclusive || h.Start != 200 || h.End != 299 {
		t.Fatalf("TEST over the guest's lock: %+v, %v", h, err)
	}

	// a guest F_SETLKW over our lock is granted after our UNLOCK, when
	// the guest's kernel sends its LOCK again
	gw := kernelpeer.HoldLock(t, gf, "w", 0, 10, true)
	if res := gw.Result(2 * time.Second); res != "" {
		t.Fatalf("guest F_SETLKW over our lock: %q", res)
	}
	if err := l.Unlock(lctx, r(0, 99, false)); err != nil {
		t.Fatal("UNLOCK:", err)
	}
	t0 := time.Now()
	if res := gw.Result(45 * time.Second); res != "locked" {
		t.Fatalf("guest F_SETLKW after our UNLOCK: %q", res)
	}
	t.Logf("guest F_SETLKW granted %v after our UNLOCK", time.Since(t0).Round(100*time.Millisecond))
	gw.Release()

	// with the guest's lockd forwarded to this host, the server's GRANTED
	// reaches it and the guest's F_SETLKW is granted at once: the guest's
	// kernel matches the callback to its blocked lock by the caller's
	// address (10.0.2.2, the server as it sees it), file handle, svid and
	// range
	if err := l.Lock(lctx, r(0, 99, true), false); err != nil {
		t.Fatal("LOCK:", err)
	}
	guestNLM.Store(int32(kernelpeer.Forward(t, kernelpeer.GuestPort(t, nlm.Program, nlm.Version))))
	gw = kernelpeer.HoldLock(t, gf, "w", 0, 10, true)
	if res := gw.Result(2 * time.Second); res != "" {
		t.Fatalf("guest F_SETLKW over our lock: %q", res)
	}
	if err := l.Unlock(lctx, r(0, 99, false)); err != nil {
		t.Fatal("UNLOCK:", err)
	}
	t0 = time.Now()
	if res := gw.Result(10 * time.Second); res != "locked" {
		t.Fatalf("guest F_SETLKW after our UNLOCK, with GRANTED forwarded: %q", res)
	}
	t.Logf("guest F_SETLKW granted %v after our UNLOCK by the GRANTED callback", time.Since(t0).Round(100*time.Millisecond))
	guestNLM.Store(0)

	// our blocked LOCK over the guest's lock is granted at its release
	got := make(chan error, 1)
	go func() { got <- l.Lock(lctx, r(290, 310, true), true) }()
	select {
	case err := <-got:
		t.Fatalf("blocking LOCK over the guest's lock returned %v", err)
	case <-time.After(time.Second):
	}
	g.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal("blocked LOCK:", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("blocked LOCK not granted after the guest's release")
	}
	gw.Release()
	if err := l.Unlock(lctx, r(0, client.MaxLockOffset, false)); err != nil {
		t.Fatal(err)
	}
	// every lock is gone from the server: the guest's went at close(2)
	deadline := time.Now().Add(10 * time.Second)
	for len(srv.Locks().Held(key)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("locks left on the server: %+v", srv.Locks().Held(key))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
