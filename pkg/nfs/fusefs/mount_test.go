package fusefs

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/exporttest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/fuseuring"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/transport"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// needFUSE skips the test without root or /dev/fuse, or fails it under CI.
func needFUSE(t *testing.T) { testenv.NeedRootFUSE(t) }

// testServer is our export server on a temp dir: NFS and MOUNT over TCP,
// NFS over RPC-over-RDMA (software iWARP) too.
type testServer struct {
	root               string
	nfsPort, mountPort int
	rdmaPort           int
	rdma               *rpcrdma.Server
	stop               func() // stops serving (idempotent)
}

func startServer(t testing.TB) *testServer {
	t.Helper()
	return startServerSIW(t, siw.Config{RTRDelay: -1})
}

// startServerSIW is startServer with the server's software iWARP device
// configured by sc.
func startServerSIW(t testing.TB, sc siw.Config) *testServer {
	t.Helper()
	return startServerExport(t, sc, nfsserver.Export{Path: "/"})
}

// startServerExport is startServerSIW exporting the temp dir as exp
// (whose Path must be "/") says, e.g. with RootSquash.
func startServerExport(t testing.TB, sc siw.Config, exp nfsserver.Export) *testServer {
	t.Helper()
	return startServerRDMA(t, sc, exp, rpcrdma.ServerOptions{})
}

// startServerRDMA is startServerExport with the RPC-over-RDMA listener's
// options ro.
func startServerRDMA(t testing.TB, sc siw.Config, exp nfsserver.Export, ro rpcrdma.ServerOptions) *testServer {
	t.Helper()
	return startServerOptions(t, sc, nfsserver.Options{Exports: []nfsserver.Export{exp}}, ro)
}

// startServerOptions is startServerRDMA with the server's options so (its
// Exports and ReadMapBytes; package exporttest serves a temp dir).
func startServerOptions(t testing.TB, sc siw.Config, so nfsserver.Options, ro rpcrdma.ServerOptions) *testServer {
	t.Helper()
	e := exporttest.Start(t, exporttest.Options{Exports: so.Exports, ReadMapBytes: so.ReadMapBytes, RDMA: true, SIW: sc, RDMAOptions: ro})
	return &testServer{root: e.Root, nfsPort: e.NFSPort, mountPort: e.MntPort, rdmaPort: e.RDMAPort, rdma: e.RDMA, stop: e.Stop}
}

// mounted reports whether dir is a mount point in /proc/mounts.
func mounted(t testing.TB, dir string) bool {
	f, err := os.Open("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fs := strings.Fields(s.Text()); len(fs) > 1 && fs[1] == dir {
			return true
		}
	}
	return false
}

// mount mounts the test server with FUSE over proto ("tcp" or "rdma") with
// extra -o options and unmounts it at the end of the test (bounded,
// lazily if busy), checking that no mount is left behind.
func (s *testServer) mount(t testing.TB, proto, extra string) (string, *Mount) {
	t.Helper()
	return s.mountWith(t, proto, extra, nil)
}

// mountWith is mount with the NFS client's dialer wrapped by wrap (if not
// nil; Config.WrapDial).
func (s *testServer) mountWith(t testing.TB, proto, extra string, wrap func(sunrpc.DialFunc) sunrpc.DialFunc) (string, *Mount) {
	t.Helper()
	o := "proto=" + proto + ",mountport=" + strconv.Itoa(s.mountPort)
	if proto == mountopts.ProtoRDMA {
		o += ",port=" + strconv.Itoa(s.rdmaPort) + ",credits=16"
	} else {
		o += ",port=" + strconv.Itoa(s.nfsPort)
	}
	if extra != "" {
		o += "," + extra
	}
	if u := os.Getenv("NFSRDMA_TEST_FUSE_URING"); u != "" && !strings.Contains(o, "fuse_uring=") {
		o += ",fuse_uring=" + u // the suite over FUSE over io_uring (uring_test.go)
	}
	mo, err := mountopts.Parse(o)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transport.ForMount("127.0.0.1", mo, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := NewMount(ctx, dir, Config{Source: "127.0.0.1:/", Options: mo, AuthSys: sunrpc.AuthSysParams{MachineName: "fusefs-test"}, WrapDial: wrap,
		Dial: tr.Dial, Transport: tr.Name})
	if err != nil {
		t.Fatal("mount:", err)
	}
	cleanupMount(t, dir, m)
	return dir, m
}

// wrapConns returns a Config.WrapDial that passes each NFS connection the
// mount dials through f (to count or delay its calls).
func wrapConns(f func(sunrpc.ClientTransport) sunrpc.ClientTransport) func(sunrpc.DialFunc) sunrpc.DialFunc {
	return func(d sunrpc.DialFunc) sunrpc.DialFunc {
		return func(ctx context.Context) (sunrpc.ClientTransport, error) {
			ct, err := d(ctx)
			if err != nil {
				return nil, err
			}
			return f(ct), nil
		}
	}
}

// cleanupMount serves m (mounted on dir) until the end of the test, then
// unmounts it (bounded, lazily if busy) and checks that the FUSE server
// stopped and that no mount is left behind.
func cleanupMount(t testing.TB, dir string, m *Mount) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Wait() }()
	watchdog(t, st.Dev)
	t.Cleanup(func() {
		if err := m.Unmount(5 * time.Second); err != nil {
			t.Error("unmount:", err)
		}
		select {
		case <-done: // a UMNT error is not checked: some tests stop the server
		case <-time.After(10 * time.Second):
			// Files of this process left open on a lazily detached
			// mount: abort the connection, or the test binary would
			// hang at exit flushing them to itself.
			t.Error("FUSE server did not stop after unmount; aborting the connection")
			abortFUSE(t, st.Dev)
			<-done
		}
		if mounted(t, dir) {
			t.Errorf("%s still mounted", dir)
		}
	})
}

// watchdog aborts the FUSE connection of device dev 20 s before the
// test binary's deadline (-timeout; after 5 minutes without one), so that
// a request this process hangs on becomes ENOTCONN and a failed test,
// never a caller of this process waiting in the kernel for an answer
// only this process can give (a thread stuck in request_wait_answer
// keeps the process, and its /dev/fuse fd, alive).
func watchdog(t testing.TB, dev uint64) {
	d := 5 * time.Minute
	if tt, ok := t.(*testing.T); ok {
		if dl, ok := tt.Deadline(); ok {
			d = time.Until(dl) - 20*time.Second
		}
	}
	minor := (dev & 0xff) | ((dev >> 12) & 0xfff00)
	timer := time.AfterFunc(max(d, time.Second), func() {
		_ = fuseuring.AbortConnection(minor)
	})
	t.Cleanup(func() { timer.Stop() })
}

// abortFUSE aborts the FUSE connection of device dev through fusectl.
func abortFUSE(t testing.TB, dev uint64) {
	const ctl = "/sys/fs/fuse/connections"
	if ents, err := os.ReadDir(ctl); err != nil || len(ents) == 0 {
		_ = syscall.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	minor := (dev & 0xff) | ((dev >> 12) & 0xfff00)
	p := ctl + "/" + strconv.FormatUint(minor, 10) + "/abort"
	if err := os.WriteFile(p, []byte("1"), 0); err != nil {
		t.Error("abort:", err)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveDrivers()
	os.Exit(code)
}
