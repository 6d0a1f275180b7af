package server

import (
	"context"
	"crypto/md5"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/kernelpeer"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// TestKernelClientOverRDMA: the Linux NFS client of the kernel peer
// mounts our export server over RPC-over-RDMA (kernel siw to our siw) and
// reads and writes through it. Linux speaks RPC-over-RDMA version 1: the
// server, which also serves version 2, speaks the version of the
// connection's first message, 1 (the draft's section 4.3.3).
func TestKernelClientOverRDMA(t *testing.T) {
	kernelpeer.Env(t, "KP_NFSRDMA_PORT")
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello from our server\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Root: root, Exports: []Export{{Path: "/"}}})
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
	nl, ml, rl := listen(), listen(), listen()
	rdmaAddr := rl.Addr().String()
	rl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- srv.Serve(ctx, nl, ml) }()
	go func() {
		done <- serveRDMA(ctx, srv, siw.NewDevice(siw.Config{}), rdmaAddr, rpcrdma.ServerOptions{Credits: 16, SendDDP: true, Inline: rpcrdma.SDDPInline}) // as driver server runs by default
	}()
	defer func() {
		cancel()
		<-done
		<-done
	}()
	defer func() {
		time.Sleep(300 * time.Millisecond)
		kernelpeer.Check(t)
	}()
	_, rport, _ := net.SplitHostPort(rdmaAddr)
	// 10.0.2.2 is the host as qemu's user-mode network shows it to the
	// guest; it reaches our listeners on 127.0.0.1.
	mnt := fmt.Sprintf("/mnt/ours-%d", time.Now().UnixNano())
	kernelpeer.Sh(t, fmt.Sprintf("mkdir -p %s && timeout 40 mount -t nfs -o vers=3,proto=rdma,port=%s,mountport=%d,mountproto=tcp 10.0.2.2:/ %s",
		mnt, rport, ml.Addr().(*net.TCPAddr).Port, mnt))
	defer kernelpeer.Sh(t, fmt.Sprintf("umount -f %s 2>/dev/null; rmdir %s; true", mnt, mnt))

	var vers []int
	for _, ci := range srv.RDMAConnections() {
		vers = append(vers, ci.Version)
	}
	if len(vers) == 0 || vers[0] != 1 {
		t.Fatalf("RDMA connections' versions %v, want one connection in version 1", vers)
	}
	out := kernelpeer.Sh(t, fmt.Sprintf("cat %s/hello.txt && head -c 300000 /dev/urandom > /tmp/k.bin && cp /tmp/k.bin %s/k.bin && sync && cmp /tmp/k.bin %s/k.bin && md5sum /tmp/k.bin", mnt, mnt, mnt))
	if !strings.HasPrefix(out, "hello from our server\n") {
		t.Fatalf("read through the kernel's mount: %q", out)
	}
	got, err := os.ReadFile(filepath.Join(root, "k.bin"))
	if err != nil || len(got) != 300000 {
		t.Fatalf("file written by the kernel client: %d bytes, %v", len(got), err)
	}
	if sum := fmt.Sprintf("%x", md5.Sum(got)); !strings.Contains(out, sum) {
		t.Fatalf("file on the server's disk (md5 %s) differs from the guest's: %q", sum, out)
	}
	t.Logf("kernel client over RDMA: %s; connections %+v", strings.TrimSpace(out[len("hello from our server\n"):]), srv.RDMAConnections())
}
