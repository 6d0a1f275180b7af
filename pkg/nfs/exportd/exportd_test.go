package exportd

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockd"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/server"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// TestRunConfigErrors: a configuration Run refuses is an error before
// anything is served.
func TestRunConfigErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"admin without token", Config{Root: dir, AdminListen: "127.0.0.1:0"}, "needs --admin-token-file"},
		{"admin token file missing", Config{Root: dir, AdminListen: "127.0.0.1:0", AdminTokenFile: filepath.Join(dir, "none")}, "admin token"},
		{"admin token empty", Config{Root: dir, AdminListen: "127.0.0.1:0", AdminTokenFile: empty}, "is empty"},
		{"negative grace", Config{Root: dir, Locks: lockd.Options{GracePeriod: -time.Second}}, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(t.Context(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestRunServesAndStops runs the whole export server (NFS, MOUNT, NLM,
// NSM, the admin API) on free loopback ports: a client mounts
// a volume the admin API registered and granted, the admin API answers with the configured
// version and root, and Run returns nil once its context ends.
func TestRunServesAndStops(t *testing.T) {
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	root, state := t.TempDir(), t.TempDir()
	tokenFile := filepath.Join(state, "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "vol"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Root: root, Listen: "127.0.0.1", Version: "test",
		NFSPort: testenv.FreePort(t), MountPort: testenv.FreePort(t), NLMPort: 0, NSMPort: 0,
		AdminListen: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)), AdminTokenFile: tokenFile,
		StateDir: filepath.Join(state, "reg"),
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	var runErr error
	stopped := false
	stop := func() error {
		if !stopped {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not return after its context ended")
			}
			stopped = true
		}
		return runErr
	}
	t.Cleanup(func() { stop() })

	adm := admin.NewClient("http://"+cfg.AdminListen, "tok", nil)
	var st admin.Status
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if st, err = adm.Status(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin API: %v", err)
		}
		select {
		case runErr = <-done:
			stopped = true
			t.Fatalf("Run ended early: %v", runErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if st.Version != "test" || st.Root != root {
		t.Fatalf("status %+v, want version test, root %s", st, root)
	}
	if _, err := adm.PutVolume(ctx, "vol", 1<<20); err != nil {
		t.Fatal(err)
	}

	if err := adm.Grant(ctx, "vol", admin.Access{Node: "n1", Addrs: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	c, err := client.Mount(ctx, client.Options{
		Server: "127.0.0.1", NFSPort: cfg.NFSPort, MountPort: cfg.MountPort, Export: "/vol",
		AuthSys: sunrpc.AuthSysParams{MachineName: "test"},
		Retry:   sunrpc.RetryPolicy{Soft: true, Retries: 2},
	})
	if err != nil {
		t.Fatalf("mounting the volume the admin API registered: %v", err)
	}
	c.Close()

	if err := stop(); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "state.json")); err != nil {
		t.Fatalf("registry not kept in the state directory: %v", err)
	}
	if _, err := adm.Status(context.Background()); err == nil || errors.Is(err, admin.ErrUnauthenticated) {
		t.Fatalf("admin API still answers after Run returned: %v", err)
	}
}

// TestNewTakesListeners: New serves the listener the caller opened in
// place of a port, opens NFS/RDMA itself, and reports both in Ports; a
// client mounts over each, and the RDMA connection shows the version it
// negotiated. Serve returns nil once its context ends.
func TestNewTakesListeners(t *testing.T) {
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Root: t.TempDir(), Listen: "127.0.0.1", NLMPort: -1,
		RDMAPort: testenv.FreePort(t), RDMADevice: siw.NewDevice(siw.Config{RTRDelay: -1}),
		Listeners: Listeners{NFS: nl},
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := s.Ports()
	if p.NFS != nl.Addr().(*net.TCPAddr).Port || p.Mount == 0 || p.RDMA != cfg.RDMAPort || p.NLM != 0 || p.Admin != 0 {
		t.Fatalf("ports %+v: want NFS %d (the given listener), a MOUNT port, RDMA %d, no NLM, no admin API", p, nl.Addr().(*net.TCPAddr).Port, cfg.RDMAPort)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	// without Exports nothing is exported: not even the root
	mc, err := client.Mount(ctx, client.Options{Server: "127.0.0.1", NFSPort: p.NFS, MountPort: p.Mount, Export: "/",
		AuthSys: sunrpc.AuthSysParams{MachineName: "test"}, Retry: sunrpc.RetryPolicy{Soft: true, Retries: 2}})
	if err == nil {
		mc.Close()
		t.Fatal("the root mounted from a server given no exports")
	}
	if err := s.Protocol().SetExports([]server.Export{{Path: "/", Clients: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}}); err != nil {
		t.Fatal(err)
	}
	for _, proto := range []string{"tcp", "rdma"} {
		o := client.Options{
			Server: "127.0.0.1", NFSPort: p.NFS, MountPort: p.Mount, Export: "/",
			AuthSys: sunrpc.AuthSysParams{MachineName: "test"},
			Retry:   sunrpc.RetryPolicy{Soft: true, Retries: 2},
		}
		if proto == "rdma" {
			o.NFSPort, o.Transport = p.RDMA, "rdma"
			o.Dial = rpcrdma.Dialer(siw.NewDevice(siw.Config{RTRDelay: -1}), net.JoinHostPort("127.0.0.1", strconv.Itoa(p.RDMA)), rpcrdma.ClientOptions{})
		}
		c, err := client.Mount(ctx, o)
		if err != nil {
			t.Fatalf("mount over %s: %v", proto, err)
		}
		if proto == "rdma" {
			cs := s.Protocol().RDMAConnections()
			if len(cs) != 1 || cs[0].Version != rpcrdma.Version2 {
				t.Errorf("RDMA connections %+v: want one of version %d", cs, rpcrdma.Version2)
			}
		}
		c.Close()
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	if _, err := net.Dial("tcp", nl.Addr().String()); err == nil {
		t.Error("the given NFS listener still accepts after Serve returned")
	}
}
