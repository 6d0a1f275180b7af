package mounter

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/metrics"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// callbackBound is how soon after the holder's unlock a waiter granted by
// callback has its lock; the re-send fallback comes up to a second later.
const callbackBound = 100 * time.Millisecond

// TestNodeLockCallbacks runs the real pieces of a node: the export server
// (`driver server`, over TCP and over RDMA with software iWARP), this
// machine's rpcbind, the mounter with its lock callback service, and three
// `driver mount` processes serving FUSE mounts of one export. Each mount
// holds a write lock on one file and has a process blocked in F_SETLKW on
// the file the next mount holds. After each unlock, the waiter must be
// granted by the server's GRANTED callback through the node's one
// callback service (the mounter counts it, the mount logs "granted by
// callback"), within callbackBound of the unlock. With the export server
// in the same rpcbind (a server on the node's host network), the
// callbacks reach the server's NLM first, which relays them to the
// mounter.
func TestNodeLockCallbacks(t *testing.T) {
	testenv.NeedRootFUSE(t)
	rpcbind := testenv.NeedRPCBind(t)
	bin := testenv.Driver(t, false)
	for _, tc := range []struct {
		name        string
		proto       string
		hostNetwork bool
	}{
		{"tcp", "tcp", false},
		{"rdma", "rdma", false},
		{"tcp/server-in-rpcbind", "tcp", true},
		{"rdma/server-in-rpcbind", "rdma", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testNodeLockCallbacks(t, bin, rpcbind, tc.proto, tc.hostNetwork)
		})
	}
}

func testNodeLockCallbacks(t *testing.T, bin, rpcbind, proto string, hostNetwork bool) {
	// short paths: unix socket paths are limited to 108 bytes
	dir, err := os.MkdirTemp("", "nlcb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	s := startNodeMounter(t, bin, dir)
	lockSock := s.LockSocket
	if !hostNetwork {
		// the mounter holds NLM v4 in the node's rpcbind; another live
		// NLM service of this machine would keep it
		if !testenv.WaitFor(10*time.Second, func() bool { return nlmPort(t, rpcbind) == s.CallbackPort() }) {
			t.Skipf("NLM v4 is held in %s by another live service (port %d): GRANTED would not reach this mounter", rpcbind, nlmPort(t, rpcbind))
		}
	}

	// the export server
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o777); err != nil {
		t.Fatal(err)
	}
	nfsP, mntP, rdmaP, nlmP, nsmP := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	args := []string{"server", "--root", root, "--export", "/:127.0.0.1/32:rw,no_root_squash", "--listen", "127.0.0.1", "--state-dir=",
		"--nfs-port", strconv.Itoa(nfsP), "--mount-port", strconv.Itoa(mntP), "--rdma-port", strconv.Itoa(rdmaP),
		"--nlm-port", strconv.Itoa(nlmP), "--nsm-port", strconv.Itoa(nsmP), "--rpcbind=" + strconv.FormatBool(hostNetwork)}
	if hostNetwork {
		args = append(args, "--node-lock-socket", lockSock)
	}
	var srvLog testenv.Buffer
	srv := exec.Command(bin, args...)
	srv.Stdout, srv.Stderr = &srvLog, &srvLog
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			t.Logf("---- server log ----\n%s", srvLog.String())
		}
	})
	serving := testenv.Dialable("tcp", "127.0.0.1:"+strconv.Itoa(nlmP))
	testenv.Eventually(t, 30*time.Second, "export server", func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("export server exited: %v\n%s", err, srvLog.String())
		default:
		}
		return serving()
	})
	if hostNetwork {
		testenv.Eventually(t, 10*time.Second, "the export server's NLM in rpcbind", func() bool { return nlmPort(t, rpcbind) == nlmP })
	}

	// three mounts through the mounter
	opts := fmt.Sprintf("proto=%s,mountport=%d,lockport=%d,actimeo=0", proto, mntP, nlmP)
	if proto == "rdma" {
		opts += ",port=" + strconv.Itoa(rdmaP) + ",rdmadev=siw"
	} else {
		opts += ",port=" + strconv.Itoa(nfsP)
	}
	mounts := mountThrough(t, s, dir, "127.0.0.1:/", []string{opts, opts, opts})
	for i := range mounts {
		f := filepath.Join(mounts[0].Target, "f"+strconv.Itoa(i))
		if err := os.WriteFile(f, nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	waitersGranted(t, s, mounts, "", "GRANTED", callbackBound)
	notifyReachesMounts(t, s, rpcbind, mounts)
	if hostNetwork && !strings.Contains(srvLog.String(), "taking the lock program's registration") {
		t.Error("the export server did not take NLM's registration from the node's callback service")
	}
}

// startNodeMounter runs a mounter with the node's lock callback service
// (sockets in dir, mount processes of the driver binary bin) until the
// test ends.
func startNodeMounter(t *testing.T, bin, dir string) *Server {
	t.Helper()
	s := &Server{Socket: filepath.Join(dir, "mounter.sock"), StateDir: filepath.Join(dir, "state"), Exe: bin, LockSocket: filepath.Join(dir, "lockd.sock")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error("mounter:", err)
		}
	})
	testenv.Eventually(t, 10*time.Second, "mounter socket", testenv.Dialable("unixpacket", s.Socket))
	return s
}

// mountThrough mounts source once per entry of opts through the mounter
// s, on new directories under dir, as the node plugin does; the mounts
// are unmounted when the test ends.
func mountThrough(t *testing.T, s *Server, dir, source string, opts []string) []Mount {
	t.Helper()
	ctx := testenv.Context(t, 2*time.Minute)
	c := &Client{Socket: s.Socket}
	var mounts []Mount
	for i, o := range opts {
		target := filepath.Join(dir, "m"+strconv.Itoa(i))
		if err := os.Mkdir(target, 0o755); err != nil {
			t.Fatal(err)
		}
		fuse := mountFUSE(t, target)
		m, err := c.Mount(ctx, Mount{Target: target, Source: source, Options: o, LockCallerName: "node-1"}, fuse)
		fuse.Close()
		if err != nil {
			_ = unix.Unmount(target, unix.MNT_DETACH)
			t.Fatal(err)
		}
		mounts = append(mounts, m)
		t.Cleanup(func() {
			if t.Failed() {
				b, _ := os.ReadFile(m.Log)
				t.Logf("---- mount %d log ----\n%s", i, b)
			}
			_ = unix.Unmount(m.Target, unix.MNT_DETACH)
			_ = c.Release(context.Background(), m.Target, 5*time.Second)
		})
	}
	return mounts
}

// lockProc is a lockhelper process (lockHelperMain).
type lockProc struct {
	in    io.WriteCloser
	lines chan string
}

// startLockProc runs a lockhelper process for path in mode, killed when
// the test ends.
func startLockProc(t *testing.T, path, mode string) *lockProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "lockhelper", path, mode)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &lockProc{in: in, lines: make(chan string, 4)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return p
}

// expect waits up to d for the process's next line and fails t unless it
// is want; it returns when the line came.
func (p *lockProc) expect(t *testing.T, want string, d time.Duration) time.Time {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		at := time.Now()
		if !ok || l != want {
			t.Fatalf("lock process said %q (open: %v), want %q", l, ok, want)
		}
		return at
	case <-time.After(d):
		t.Fatalf("lock process did not say %q within %v", want, d)
	}
	return time.Time{}
}

// waitersGranted: through each mount i, a process holds a write lock on
// sub/f<i>, and another process waits in F_SETLKW for the same file
// through mount i+1. After each unlock, the waiter must be granted by
// the server's callback (proc, as the mounter counts it; the mount logs
// "granted by callback" and never "granted by retry") within bound.
func waitersGranted(t *testing.T, s *Server, mounts []Mount, sub, proc string, bound time.Duration) {
	t.Helper()
	n := len(mounts)
	holders, waiters := make([]*lockProc, n), make([]*lockProc, n)
	for i := range n {
		holders[i] = startLockProc(t, filepath.Join(mounts[i].Target, sub, "f"+strconv.Itoa(i)), "hold")
		holders[i].expect(t, "locked", 30*time.Second)
	}
	for i := range n {
		waiters[i] = startLockProc(t, filepath.Join(mounts[(i+1)%n].Target, sub, "f"+strconv.Itoa(i)), "wait")
		waiters[i].expect(t, "waiting", 30*time.Second)
	}
	// every waiter's LOCK is blocked on the server (and re-sent each
	// second) before the first unlock
	time.Sleep(1500 * time.Millisecond)
	for i, w := range waiters {
		select {
		case l := <-w.lines:
			t.Fatalf("waiter %d said %q before the unlock", i, l)
		default:
		}
	}
	before := countOf(s.CallbackCounts(), proc, "granted")
	for i := range n {
		start := time.Now()
		if _, err := io.WriteString(holders[i].in, "unlock\n"); err != nil {
			t.Fatal(err)
		}
		at := waiters[i].expect(t, "granted", 10*time.Second)
		holders[i].expect(t, "unlocked", 10*time.Second)
		delay := at.Sub(start)
		t.Logf("waiter %d (mount %d) granted %v after the unlock", i, (i+1)%n, delay)
		if delay > bound {
			t.Errorf("waiter %d granted %v after the unlock, want within %v", i, delay, bound)
		}
	}
	// the mounter counts a callback once the mount answered it, which may
	// be after the waiter returned
	testenv.WaitFor(5*time.Second, func() bool { return countOf(s.CallbackCounts(), proc, "granted")-before >= uint64(n) })
	counts := s.CallbackCounts()
	t.Logf("mounter callbacks: %+v", counts)
	if got := countOf(counts, proc, "granted") - before; got != uint64(n) {
		t.Errorf("mounter routed %d %s callbacks to a waiting lock, want %d", got, proc, n)
	}
	for i := range n {
		b, err := os.ReadFile(mounts[(i+1)%n].Log)
		if err != nil {
			t.Fatal(err)
		}
		log := string(b)
		if !strings.Contains(log, "granted by callback") || strings.Contains(log, "granted by retry") {
			t.Errorf("mount %d: want its waiter granted by callback, not by retry; log:\n%s", (i+1)%n, log)
		}
	}
}

// notifyReachesMounts sends SM_NOTIFY (mon_name 127.0.0.1: the server
// restarted) to the NSM registered in rpcbind, the node's callback service
// or a server relaying to it; every mount, each holding a lock on the
// server, must start reclaiming its locks.
func notifyReachesMounts(t *testing.T, s *Server, rpcbind string, mounts []Mount) {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	port, err := sunrpc.PortmapGetPort(ctx, rpcbind, sunrpc.Mapping{Prog: nsm.Program, Vers: nsm.Version, Prot: sunrpc.IPProtoTCP})
	if err != nil || port == 0 {
		t.Fatalf("NSM in rpcbind: %d, %v", port, err)
	}
	before := countOf(s.CallbackCounts(), "SM_NOTIFY", "delivered")
	c, err := sunrpc.NewClient(sunrpc.TCPDialer("127.0.0.1:"+strconv.Itoa(port), sunrpc.TCPOptions{}), sunrpc.ClientOptions{Retry: sunrpc.RetryPolicy{Soft: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := nsm.StatChge{MonName: "127.0.0.1", State: 3}
	if err := c.Call(ctx, sunrpc.CallSpec{Prog: nsm.Program, Vers: nsm.Version, Proc: nsm.ProcNotify,
		Args: func(b *sunrpc.Builder) { a.Encode(&b.Encoder) }}); err != nil {
		t.Fatal("SM_NOTIFY:", err)
	}
	testenv.Eventually(t, 10*time.Second, "SM_NOTIFY delivered to every mount", func() bool {
		return countOf(s.CallbackCounts(), "SM_NOTIFY", "delivered")-before == uint64(len(mounts))
	})
	for i, m := range mounts {
		testenv.Eventually(t, 10*time.Second, "mount "+strconv.Itoa(i)+" reclaiming its locks", func() bool {
			b, _ := os.ReadFile(m.Log)
			return strings.Contains(string(b), `"NLM: reclaiming locks" server="127.0.0.1" reason="SM_NOTIFY from 127.0.0.1"`)
		})
	}
}

// nlmPort is the port of NLM v4 over TCP in rpcbind (0: none).
func nlmPort(t *testing.T, rpcbind string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	p, err := sunrpc.PortmapGetPort(ctx, rpcbind, sunrpc.Mapping{Prog: nlm.Program, Vers: nlm.Version, Prot: sunrpc.IPProtoTCP})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// countOf returns the count of proc and result in cs.
func countOf(cs []metrics.NLMCallbackCount, proc, result string) uint64 {
	for _, c := range cs {
		if c.Proc == proc && c.Result == result {
			return c.N
		}
	}
	return 0
}

// mountFUSE opens /dev/fuse and mounts it on target as the node plugin
// does, returning the fd for the mounter.
func mountFUSE(t *testing.T, target string) *os.File {
	t.Helper()
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	opts := strings.Join(append([]string{"fd=" + strconv.Itoa(int(f.Fd())), "rootmode=40000", "user_id=0", "group_id=0",
		"allow_other", "max_read=" + strconv.Itoa(client.MaxIOSize)}, mountopts.KernelOptions...), ",")
	if err := unix.Mount("127.0.0.1:/", target, "fuse.nfsrdma", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		f.Close()
		t.Fatal(err)
	}
	return f
}

// TestMountLockSocketFlag: a mount process is told the node's callback
// socket (--node-lock-socket) while the mounter's callback service runs,
// and not when it could not start (then each mount serves its own).
func TestMountLockSocketFlag(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, lockSocket string
		want             bool
	}{
		{"running", filepath.Join(t.TempDir(), "lockd.sock"), true},
		{"failed", "/proc/self/no/lockd.sock", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := &Server{Socket: filepath.Join(dir, "mounter.sock"), StateDir: filepath.Join(dir, "state"), Exe: exe,
				ExtraArgs: []string{"--helper=serve"}, LockSocket: tc.lockSocket, RPCBind: "127.0.0.1:1"}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			testenv.Eventually(t, 10*time.Second, "mounter socket", testenv.Dialable("unixpacket", s.Socket))
			target := newTarget(t)
			m, err := (&Client{Socket: s.Socket}).Mount(testenv.Context(t, time.Minute), Mount{Target: target, Source: "10.0.0.1:/vol"}, tokenFile(t, "x"))
			if err != nil {
				t.Fatal(err)
			}
			defer killWait(t, m.PID)
			args, err := os.ReadFile(filepath.Join(target, "args"))
			if err != nil {
				t.Fatal(err)
			}
			flag := "--node-lock-socket=" + tc.lockSocket
			if got := slices.Contains(strings.Split(string(args), "\n"), flag); got != tc.want {
				t.Errorf("mount process arguments %q: %s given: %v, want %v", args, flag, got, tc.want)
			}
			if got := s.CallbackPort() != 0; got != tc.want {
				t.Errorf("callback service running: %v, want %v", got, tc.want)
			}
		})
	}
}
