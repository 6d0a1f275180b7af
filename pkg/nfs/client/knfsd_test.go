package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/kernelpeer"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// TestKnfsdOverRDMA mounts Linux knfsd's /export (../shared/kernel-peer)
// with our client: MOUNT over TCP, NFS over RPC-over-RDMA through kernel
// siw. It creates a file, writes 64 MiB, reads it back, lists the
// directory and removes the file, and checks in the guest that the bytes on
// knfsd's /export are exactly what was written.
func TestKnfsdOverRDMA(t *testing.T) {
	env := kernelpeer.Env(t, "KP_NFSRDMA_PORT")
	defer kernelpeer.Check(t)
	mountPort, _ := strconv.Atoi(env["KP_MOUNT_PORT"])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m := new(rpcrdma.ClientMetrics)
	c, err := Mount(ctx, Options{
		Server:    env["KP_HOST"],
		MountPort: mountPort,
		Export:    "/export",
		AuthSys:   sunrpc.AuthSysParams{MachineName: "nfsrdma-test"},
		Transport: "rdma",
		Dial:      rpcrdma.Dialer(siw.NewDevice(siw.Config{}), env["KP_HOST"]+":"+env["KP_NFSRDMA_PORT"], rpcrdma.ClientOptions{Metrics: m}),
	})
	if err != nil {
		t.Fatal("mount knfsd over RDMA:", err)
	}
	defer c.Unmount(context.Background())
	t.Logf("mounted: rsize %d wsize %d", c.RSize(), c.WSize())

	name := fmt.Sprintf("ours-%d", time.Now().UnixNano())
	data := make([]byte, 64<<20)
	r := rand.New(rand.NewPCG(7, 8))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	fh, _, err := c.CreateFile(ctx, c.Root(), name, 0o644, true)
	if err != nil {
		t.Fatal(err)
	}
	f := c.OpenFile(fh)
	if n, err := f.WriteAt(ctx, data, 0); err != nil || n != len(data) {
		t.Fatalf("WriteAt: %d, %v", n, err)
	}
	if err := f.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("after write+commit: rpc %+v, resent %d, rdma %+v", c.Stats(), f.Resent(), m.Metrics())
	got := make([]byte, len(data)+1)
	if n, err := c.ReadAt(ctx, fh, got, 0); n != len(data) || err != io.EOF {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	if !bytes.Equal(got[:len(data)], data) {
		t.Fatal("read back differs")
	}
	sum := sha256.Sum256(data)
	guest := kernelpeer.Sh(t, "sha256sum /export/"+name)
	if !strings.HasPrefix(guest, hex.EncodeToString(sum[:])) {
		t.Fatalf("bytes on knfsd's /export differ: guest says %q", guest)
	}
	found := false
	for e, err := range c.Readdirplus(ctx, c.Root()) {
		if err != nil {
			t.Fatal(err)
		}
		found = found || e.Name == name
	}
	if !found {
		t.Fatal("READDIRPLUS does not list the file")
	}
	if _, err := c.Remove(ctx, c.Root(), name); err != nil {
		t.Fatal(err)
	}
	kernelpeer.Sh(t, "test ! -e /export/"+name)
	st := m.Metrics()
	t.Logf("RPC-over-RDMA to knfsd: %+v", st)
	if st.ReadChunkBytes < uint64(len(data)) || st.WriteChunkBytes < uint64(len(data)) {
		t.Fatal("the data did not move in Read and Write chunks")
	}
}
