// Package exporttest runs a real export server (pkg/nfs/server with a
// pkg/nfs/volumes registry) on loopback TCP for the tests of the packages
// above it: one volume, granted to 127.0.0.1, served until the test ends.
package exporttest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	nfsserver "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/volumes"
)

// Options shape the server: Volume (default "vol") is made with Quota
// bytes (0: none) and granted to Node (default "node-1") at 127.0.0.1;
// ReadMapBytes is the server's nfsserver.Options.ReadMapBytes.
type Options struct {
	Volume       string
	Quota        int64
	Node         string
	ReadMapBytes int64
}

// Export is a running export server.
type Export struct {
	Root             string // the exported directory; the volume is Root/Volume
	Srv              *nfsserver.Server
	Reg              *volumes.Registry
	NFSPort, MntPort int
}

// Start serves a fresh directory with one volume over loopback TCP (NFS
// and MOUNT) until t ends; it needs root (file handles by
// name_to_handle_at), skipping t without it (failing it under CI=true).
func Start(t testing.TB, o Options) *Export {
	t.Helper()
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	if o.Volume == "" {
		o.Volume = "vol"
	}
	if o.Node == "" {
		o.Node = "node-1"
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := os.MkdirAll(filepath.Join(root, o.Volume), 0o777); err != nil {
		t.Fatal(err)
	}
	reg, err := volumes.New(volumes.Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	srv, err := nfsserver.New(nfsserver.Options{Root: root, Volumes: reg, ReadMapBytes: o.ReadMapBytes})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.AddVolume(o.Volume, o.Quota, nil); err != nil {
		t.Fatal(err)
	}
	if err := reg.Grant(o.Volume, admin.Access{Node: o.Node, Addrs: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		nl.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, nl, ml) }()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
	})
	return &Export{Root: root, Srv: srv, Reg: reg, NFSPort: nl.Addr().(*net.TCPAddr).Port, MntPort: ml.Addr().(*net.TCPAddr).Port}
}

// TCPOptions are the mount options (nfs(5) style) that reach e over TCP.
func (e *Export) TCPOptions() string {
	return "proto=tcp,port=" + strconv.Itoa(e.NFSPort) + ",mountport=" + strconv.Itoa(e.MntPort)
}
