package server

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	client "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// TestOurClientOverTCP mounts our export server with our NFS client over
// TCP and moves real data: a 16 MiB file written UNSTABLE + COMMIT and read
// back byte-exact, a directory of 500 entries listed with READDIRPLUS, a
// rename and a remove; the bytes are checked on the server's disk too.
func TestOurClientOverTCP(t *testing.T) {
	root := t.TempDir()
	srv, err := New(Options{Root: root, Exports: []Export{{Path: "/"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nfsL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mountL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, nfsL, mountL) }()
	defer func() { cancel(); <-served }()

	c, err := client.Mount(ctx, client.Options{
		Server:    "127.0.0.1",
		NFSPort:   nfsL.Addr().(*net.TCPAddr).Port,
		MountPort: mountL.Addr().(*net.TCPAddr).Port,
		Export:    "/",
		AuthSys:   sunrpc.AuthSysParams{MachineName: "test", UID: 0, GID: 0},
	})
	if err != nil {
		t.Fatal("mount:", err)
	}
	defer c.Unmount(context.Background())

	data := make([]byte, 16<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	fh, _, err := c.CreateFile(ctx, c.Root(), "big", 0o644, false)
	if err != nil {
		t.Fatal(err)
	}
	f := c.OpenFile(fh)
	if n, err := f.WriteAt(ctx, data, 0); err != nil || n != len(data) {
		t.Fatalf("WriteAt: %d, %v", n, err)
	}
	if err := f.Commit(ctx); err != nil {
		t.Fatal("commit:", err)
	}
	got := make([]byte, len(data))
	if n, err := f.ReadAt(ctx, got, 0); n != len(data) || (err != nil && err != io.EOF) {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back differs")
	}
	onDisk, err := os.ReadFile(root + "/big")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, data) {
		t.Fatal("bytes on the server's disk differ")
	}

	for i := 0; i < 500; i++ {
		if _, _, err := c.CreateFile(ctx, c.Root(), "f"+strconv.Itoa(i), 0o600, false); err != nil {
			t.Fatal(err)
		}
	}
	names := map[string]bool{}
	for e, err := range c.Readdirplus(ctx, c.Root()) {
		if err != nil {
			t.Fatal(err)
		}
		names[e.Name] = true
	}
	if len(names) != 500+1+2 { // the files, "big", "." and ".."
		t.Fatalf("READDIRPLUS listed %d names", len(names))
	}
	if _, err := c.Rename(ctx, c.Root(), "f0", c.Root(), "renamed"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Remove(ctx, c.Root(), "renamed"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.LookupPath(ctx, c.Root(), "renamed", false); err == nil {
		t.Fatal("removed file still found")
	}
}
