package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/fusefs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/transport"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// needFUSE skips the test without root or /dev/fuse, or fails it under CI.
func needFUSE(t *testing.T) {
	t.Helper()
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err == nil {
		f.Close()
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs /dev/fuse:", err)
	}
	t.Skip("needs /dev/fuse:", err)
}

// TestVolumeQuotaFUSE: a volume quota through the FUSE mount (`driver
// mount`), over TCP and RPC-over-RDMA: writing past a volume's quota fails
// with ENOSPC, nothing written before is lost, df shows the quota, and
// raising the quota (ControllerExpandVolume) lets the write continue.
func TestVolumeQuotaFUSE(t *testing.T) {
	for _, proto := range []string{"tcp", "rdma"} {
		t.Run(proto, func(t *testing.T) { volumeQuotaFUSE(t, proto) })
	}
}

func volumeQuotaFUSE(t *testing.T, proto string) {
	needFUSE(t)
	root, state := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "vol"), 0o777); err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	const quota = 8 * mib
	e := startVolume(t, root, state, proto == "rdma", quota, "node-a")
	ctx := ctxLong(t)
	o := "proto=" + proto + ",mountport=" + strconv.Itoa(e.mntPort) + ",soft,timeo=100,retrans=2"
	if proto == "rdma" {
		_, port, _ := net.SplitHostPort(e.rdmaAddr)
		o += ",port=" + port + ",credits=16"
	} else {
		o += ",port=" + strconv.Itoa(e.nfsPort)
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
	mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	m, err := fusefs.NewMount(mctx, dir, fusefs.Config{Source: "127.0.0.1:/vol", Options: mo, AuthSys: sunrpc.AuthSysParams{MachineName: "quota-test"},
		Dial: tr.Dial, Transport: tr.Name})
	cancel()
	if err != nil {
		t.Fatal("mount:", err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Wait() }()
	defer func() {
		if err := m.Unmount(5 * time.Second); err != nil {
			t.Error("unmount:", err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("FUSE server did not stop after unmount")
		}
	}()

	var sfs syscall.Statfs_t
	if err := syscall.Statfs(dir, &sfs); err != nil || sfs.Blocks*uint64(sfs.Bsize) != quota {
		t.Fatalf("statfs: %d blocks of %d, %v; want %d bytes", sfs.Blocks, sfs.Bsize, err, quota)
	}
	data := randomBytes(16*mib, 11)
	name := filepath.Join(dir, "data")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	written := 0
	var werr error
	for written < len(data) {
		_, err := f.WriteAt(data[written:written+mib], int64(written))
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			werr = err
			break
		}
		written += mib
	}
	f.Close() // may report the failed write again
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing past the quota through FUSE: %v after %d bytes, want ENOSPC", werr, written)
	}
	if written < 6*mib {
		t.Fatalf("ENOSPC after %d bytes with a quota of %d", written, quota)
	}
	t.Logf("ENOSPC after %d bytes (quota %d)", written, quota)
	readBack := func(n int) {
		t.Helper()
		g, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		got := make([]byte, n)
		if _, err := io.ReadFull(g, got); err != nil || !bytes.Equal(got, data[:n]) {
			t.Fatalf("reading back %d bytes: %v (equal %v)", n, err, bytes.Equal(got, data[:n]))
		}
	}
	readBack(written)

	if _, err := e.adm.PutVolume(ctx, "vol", 2*quota); err != nil {
		t.Fatal(err)
	}
	f, err = os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data[written:14*mib], int64(written)); err != nil {
		t.Fatal("writing after the quota was raised:", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	readBack(14 * mib)
	// exact: metadata blocks that delayed allocation adds at writeback,
	// between NFS calls, are counted by the next call touching the file
	checkUsage(t, e, "vol")
}
