//go:build ibverbs && cgo

package ibverbs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// TestNFSOverIbverbs mounts an NFS server's export with our NFSv3 client
// (pkg/nfs/client) over RPC-over-RDMA (pkg/rpcrdma) on this provider:
// MOUNT over TCP, NFS over RDMA. It writes 64 MiB, commits, reads them
// back, compares, checks the file's SHA-256 on the server's disk (when
// IBVERBS_NFS_DIR names the exported directory, as inside the kernel
// peer's guest) and removes the file.
//
// Env: IBVERBS_DEVICE, IBVERBS_NFS_SERVER (an address of that device's
// interface where knfsd listens for NFS/RDMA on 20049), IBVERBS_NFS_EXPORT
// (default /export), IBVERBS_NFS_DIR.
func TestNFSOverIbverbs(t *testing.T) {
	name, _ := testDevice(t)
	server := os.Getenv("IBVERBS_NFS_SERVER")
	if server == "" {
		if os.Getenv("IBVERBS_REQUIRE_DEVICE") == "1" {
			t.Fatal("IBVERBS_NFS_SERVER not set")
		}
		t.Skip("IBVERBS_NFS_SERVER not set (hack/test-ibverbs sets it in the kernel peer's guest)")
	}
	export := os.Getenv("IBVERBS_NFS_EXPORT")
	if export == "" {
		export = "/export"
	}
	dev, err := Open(name, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m := new(rpcrdma.ClientMetrics)
	c, err := client.Mount(ctx, client.Options{
		Server:    server,
		MountPort: 20048,
		Export:    export,
		AuthSys:   sunrpc.AuthSysParams{MachineName: "nfsrdma-ibverbs-test"},
		Transport: "rdma",
		Dial:      rpcrdma.Dialer(dev, net.JoinHostPort(server, "20049"), rpcrdma.ClientOptions{Metrics: m}),
	})
	if err != nil {
		t.Fatal("mount over RDMA:", err)
	}
	defer c.Unmount(context.Background())
	t.Logf("mounted %s:%s over %s (%s): rsize %d wsize %d", server, export, dev.Name(), dev.Transport(), c.RSize(), c.WSize())

	fname := fmt.Sprintf("ibverbs-%s-%d", name, time.Now().UnixNano())
	data := make([]byte, 64<<20)
	r := rand.New(rand.NewPCG(11, 12))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	fh, _, err := c.CreateFile(ctx, c.Root(), fname, 0o644, true)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove(context.Background(), c.Root(), fname)
	start := time.Now()
	f := c.OpenFile(fh)
	if n, err := f.WriteAt(ctx, data, 0); err != nil || n != len(data) {
		t.Fatalf("WriteAt: %d, %v", n, err)
	}
	if err := f.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wrote := time.Since(start)
	got := make([]byte, len(data)+1)
	start = time.Now()
	if n, err := c.ReadAt(ctx, fh, got, 0); n != len(data) || err != io.EOF {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	read := time.Since(start)
	if !bytes.Equal(got[:len(data)], data) {
		t.Fatal("read back differs")
	}
	sum := sha256.Sum256(data)
	t.Logf("64 MiB written in %v (%.0f MiB/s), read in %v (%.0f MiB/s), sha256 %x", wrote, 64/wrote.Seconds(), read, 64/read.Seconds(), sum)
	if dir := os.Getenv("IBVERBS_NFS_DIR"); dir != "" {
		onDisk, err := os.ReadFile(filepath.Join(dir, fname))
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(onDisk) != sum {
			t.Fatalf("the server's file differs: sha256 %x", sha256.Sum256(onDisk))
		}
	}
	if _, err := c.Remove(ctx, c.Root(), fname); err != nil {
		t.Fatal(err)
	}
	st := m.Metrics()
	t.Logf("RPC-over-RDMA: %+v", st)
	t.Logf("registration cache: %+v", dev.RegCacheStats())
	if st.ReadChunkBytes < uint64(len(data)) || st.WriteChunkBytes < uint64(len(data)) {
		t.Fatal("the data did not move in Read and Write chunks")
	}
	if rs := c.Stats(); rs.Retransmits != 0 || rs.Reconnects != 0 || st.Calls != st.Replies {
		t.Fatalf("calls were retransmitted or lost their replies: rpc %+v, rdma %+v", rs, st)
	}
}
