package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	client "github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// mountAs mounts "/" over RDMA as AUTH_SYS machine name, asking for 32
// credits; m receives the requester's counters.
func (e *volEnv) mountAs(ctx context.Context, t *testing.T, machine string, m *rpcrdma.ClientMetrics) *client.Client {
	t.Helper()
	c, err := client.Mount(ctx, client.Options{
		Server: "127.0.0.1", NFSPort: e.nfsPort, MountPort: e.mntPort, Export: "/",
		AuthSys:   sunrpc.AuthSysParams{MachineName: machine},
		Retry:     sunrpc.RetryPolicy{Soft: true, Retries: 2},
		Transport: "rdma",
		Dial:      rpcrdma.Dialer(siw.NewDevice(siw.Config{RTRDelay: -1}), e.rdmaAddr, rpcrdma.ClientOptions{Credits: 32, Metrics: m}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// connOf returns the admin API's connection of machine, waiting for its
// receives to reach its grant.
func connOf(t *testing.T, ctx context.Context, adm *admin.Client, machine string) admin.Connection {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		cr, err := adm.GetCredits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cr.Connections {
			if c.Machine == machine && (c.Posted == c.Grant || time.Now().After(deadline)) {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection of %q in %+v", machine, cr.Connections)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCreditGrants: the admin API sets credits per pod (AUTH_SYS machine
// name); the NFS/RDMA listener grants them per connection, posts no more
// receives than that, and the grants survive a restart of the server.
func TestCreditGrants(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	e := startVolEnv(t, root, state, true, Export{Path: "/"})
	ctx := ctxLong(t)
	adm := e.adm

	// Bad grants: refused, nothing changed.
	for _, g := range []map[string]int{{"node/ns/pod": 0}, {"": 4}, {string(make([]byte, 256)): 4}, {"a": -3}} {
		if err := adm.SetCredits(ctx, g); !errors.Is(err, admin.ErrInvalid) {
			t.Errorf("SetCredits(%v): %v, want ErrInvalid", g, err)
		}
	}
	if cr, err := adm.GetCredits(ctx); err != nil || len(cr.Grants) != 0 {
		t.Fatalf("grants after refused calls: %+v, %v", cr, err)
	}

	grants := map[string]int{"node1/default/pod-a": 4, "node1/default/pod-b": 12}
	if err := adm.SetCredits(ctx, grants); err != nil {
		t.Fatal(err)
	}
	var am, bm, cm rpcrdma.ClientMetrics
	a := e.mountAs(ctx, t, "node1/default/pod-a", &am)
	b := e.mountAs(ctx, t, "node1/default/pod-b", &bm)
	c := e.mountAs(ctx, t, "node1/default/pod-c", &cm)
	for _, cl := range []*client.Client{a, b, c} {
		if _, err := cl.Getattr(ctx, cl.Root()); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		machine string
		m       *rpcrdma.ClientMetrics
		grant   int
		named   bool
	}{{"node1/default/pod-a", &am, 4, true}, {"node1/default/pod-b", &bm, 12, true}, {"node1/default/pod-c", &cm, 16, false}} {
		if g := tc.m.Metrics().CreditsGranted; g != uint64(tc.grant) {
			t.Errorf("%s: the requester was granted %d credits, want %d", tc.machine, g, tc.grant)
		}
		conn := connOf(t, ctx, adm, tc.machine)
		if conn.Grant != tc.grant || conn.Named != tc.named || conn.Posted != tc.grant {
			t.Errorf("%s: %+v, want grant %d (named %v) with as many receives posted", tc.machine, conn, tc.grant, tc.named)
		}
	}

	// Data moves within a grant of 4: 16 MiB written, read back.
	fh, _, err := a.CreateFile(ctx, a.Root(), "f", 0o644, false)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16<<20)
	for i := range buf {
		buf[i] = byte(i / 4096)
	}
	f := a.OpenFile(fh)
	if n, err := f.WriteAt(ctx, buf, 0); err != nil || n != len(buf) {
		t.Fatalf("WriteAt: %d, %v", n, err)
	}
	if err := f.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(buf))
	if n, err := f.ReadAt(ctx, got, 0); n != len(buf) || (err != nil && err != io.EOF) {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	if !bytes.Equal(got, buf) {
		t.Fatal("read back differs")
	}
	if in := am.Metrics().CreditsInUse; in != 0 {
		t.Errorf("%d credits in use after the writes", in)
	}

	// Lowered at run time: the next reply carries it.
	if err := adm.SetCredits(ctx, map[string]int{"node1/default/pod-a": 2}); err != nil {
		t.Fatal(err)
	}
	for _, cl := range []*client.Client{a, b} {
		if _, err := cl.Getattr(ctx, cl.Root()); err != nil {
			t.Fatal(err)
		}
	}
	if ga, gb := am.Metrics().CreditsGranted, bm.Metrics().CreditsGranted; ga != 2 || gb != 16 {
		t.Errorf("after the change: granted %d and %d, want 2 and the default 16", ga, gb)
	}

	// The grants are in the state file: a new server has them.
	e.stop()
	e2 := startVolEnv(t, root, state, true, Export{Path: "/"})
	cr, err := e2.adm.GetCredits(ctx)
	if err != nil || len(cr.Grants) != 1 || cr.Grants["node1/default/pod-a"] != 2 {
		t.Fatalf("grants after a restart: %+v, %v", cr.Grants, err)
	}
	var am2 rpcrdma.ClientMetrics
	a2 := e2.mountAs(ctx, t, "node1/default/pod-a", &am2)
	if _, err := a2.Getattr(ctx, a2.Root()); err != nil {
		t.Fatal(err)
	}
	if g := am2.Metrics().CreditsGranted; g != 2 {
		t.Errorf("after a restart pod-a was granted %d, want 2", g)
	}
}
