package fusemount

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/exporttest"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

// startExport serves a volume "vol" of an export server on loopback TCP
// (NFS and MOUNT) and returns the -o options that reach it.
func startExport(t *testing.T) (root, opts string) {
	t.Helper()
	e := exporttest.Start(t, exporttest.Options{Node: "n"})
	return e.Root, e.TCPOptions() + ",nolock"
}

// readyPipe returns the read end of a pipe and the write end's fd, owned
// by no *os.File (Run closes it, as the inherited fd of `driver mount`).
func readyPipe(t *testing.T) (*os.File, int) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(pw.Fd()))
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	return pr, fd
}

// Run mounts through FUSE, reports "ok" on the ready fd, serves the
// mount's metrics on its socket, and unmounts when its context ends.
func TestRun(t *testing.T) {
	testenv.NeedRootFUSE(t)
	root, opts := startExport(t)
	dir := t.TempDir()
	sock := filepath.Join(t.TempDir(), "metrics.sock")
	pr, readyFD := readyPipe(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Source: "127.0.0.1:/vol", Dir: dir, Options: opts, ReadyFD: readyFD,
			MetricsSocket: sock, MachineName: "fusemount-test", UnmountTimeout: 5 * time.Second})
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || line != "ok\n" {
		t.Fatalf("ready line %q, %v", line, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "vol", "f")); err != nil || string(b) != "hello" {
		t.Fatalf("export holds %q, %v", b, err)
	}

	body := scrape(t, sock)
	for _, name := range []string{"nfsrdma_client_rpc_duration_seconds", "nfsrdma_mount_memory_limit_bytes", "nfsrdma_mount_inodes"} {
		if !strings.Contains(body, name) {
			t.Errorf("metrics lack %s...", name)
		}
	}
	if strings.Contains(body, "nfsrdma_rpcrdma_") {
		t.Error("RPC-over-RDMA metrics on a TCP mount")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal("Run:", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if _, err := os.Stat(filepath.Join(dir, "f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Run: %s/f: %v; want the mount gone", dir, err)
	}
}

// scrape returns the metrics served on the unix socket sock, waiting up
// to 5 s for the socket.
func scrape(t *testing.T, sock string) string {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp, err := hc.Get("http://mount/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatal("metrics socket:", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A bad option is reported on the ready fd and returned.
func TestRunBadOption(t *testing.T) {
	pr, readyFD := readyPipe(t)
	err := Run(context.Background(), Config{Source: "127.0.0.1:/vol", Dir: t.TempDir(), Options: "proto=udp", ReadyFD: readyFD})
	if !errors.Is(err, mountopts.ErrBadOption) {
		t.Fatalf("Run: %v; want ErrBadOption", err)
	}
	line, _ := bufio.NewReader(pr).ReadString('\n')
	if !strings.HasPrefix(line, "error: ") || !strings.Contains(line, "proto") {
		t.Fatalf("ready line %q", line)
	}
}

// keepOpen keeps a handed-over process's end of the handover socket open
// after its *net.UnixConn is garbage: the successor sees no end (EOF)
// while the process lives.
func TestKeepOpen(t *testing.T) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(t.TempDir(), "s"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	peer, err := net.DialUnix("unix", nil, l.Addr().(*net.UnixAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	func() {
		c, err := l.AcceptUnix()
		if err != nil {
			t.Fatal(err)
		}
		keepOpen(c)
	}()
	for range 5 {
		runtime.GC() // the conn's finalizer closes its descriptor
		time.Sleep(20 * time.Millisecond)
	}
	_ = peer.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var b [1]byte
	if _, err := peer.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from the peer of a kept socket: %v, want a timeout (no EOF)", err)
	}
}
