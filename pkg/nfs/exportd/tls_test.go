package exportd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testpki"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/transport"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// tlsEnv is an export server with RPC-with-TLS and two volumes: "vol",
// published to node "node-a" at an address that is not the test's (so
// that only its certificate can name it), and "byaddr", published to a
// node at 127.0.0.1 that has no name.
type tlsEnv struct {
	ca    *testpki.CA
	srv   *Server
	ports Ports
}

func startTLSServer(t *testing.T, required bool, ca *testpki.CA, serverCert, serverKey string) *tlsEnv {
	t.Helper()
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	cfg := Config{Root: t.TempDir(), Listen: "127.0.0.1", NLMPort: -1, RDMAPort: 0, TLSRequired: required}
	if ca != nil {
		var err error
		if cfg.TLS, err = LoadTLS(serverCert, serverKey, ca.File, ""); err != nil {
			t.Fatal(err)
		}
	}
	s := serveVolumes(t, cfg,
		testVolume{"vol", admin.Access{Node: "node-a@10.9.9.9", Name: "node-a", Addrs: []string{"10.9.9.9"}}},
		testVolume{"byaddr", admin.Access{Node: "node-b@127.0.0.1", Addrs: []string{"127.0.0.1"}}})
	return &tlsEnv{ca: ca, srv: s, ports: s.Ports()}
}

// mount mounts export over TCP with the options opts (nfs(5), parsed as
// driver mount does) and the TLS files f.
func (e *tlsEnv) mount(t *testing.T, export, opts string, f transport.TLSFiles) (*client.Client, error) {
	t.Helper()
	o, err := mountopts.Parse(opts)
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := transport.TCPForMount("127.0.0.1", o, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return client.Mount(ctx, client.Options{
		Server: "127.0.0.1", NFSPort: e.ports.NFS, MountPort: e.ports.Mount, Export: export,
		AuthSys: sunrpc.AuthSysParams{MachineName: "test"},
		Retry:   sunrpc.RetryPolicy{Soft: true, Retries: 1, Timeout: 5 * time.Second},
		TCP:     tcp,
	})
}

// writeRead creates a file in c's export, writes and reads it back.
func writeRead(t *testing.T, c *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fh, _, err := c.CreateFile(ctx, c.Root(), "f", 0o644, false)
	if err != nil {
		t.Fatal(err)
	}
	f := c.OpenFile(fh)
	if _, err := f.WriteAt(ctx, []byte("over TLS"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if n, err := c.OpenFile(fh).ReadAt(ctx, buf, 0); err != nil || string(buf[:n]) != "over TLS" {
		t.Fatalf("read back %q, %v", buf[:n], err)
	}
}

// TestRPCWithTLS: our client and our export server over real sockets with
// generated certificates: xprtsec=tls (TLS 1.3, the server verified, the
// client known by address only), xprtsec=mtls with a node certificate
// granted a volume by name, certificates refused at the handshake
// (expired, from another CA), xprtsec=mtls against a server without TLS,
// and, on a server requiring TLS, a plaintext client denied AUTH_TOOWEAK
// and an address no longer enough.
func TestRPCWithTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := testpki.New(t, dir, "cluster"), testpki.New(t, dir, "other")
	now := time.Now()
	srvCert, srvKey := ca.Issue(t, "nfs-server", []net.IP{net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth, now.Add(-time.Minute), now.Add(time.Hour))
	nodeA, nodeAKey := ca.Issue(t, "node-a", nil, x509.ExtKeyUsageClientAuth, now.Add(-time.Minute), now.Add(time.Hour))
	expired, expiredKey := ca.Issue(t, "node-a", nil, x509.ExtKeyUsageClientAuth, now.Add(-2*time.Hour), now.Add(-time.Hour))
	foreign, foreignKey := other.Issue(t, "node-a", nil, x509.ExtKeyUsageClientAuth, now.Add(-time.Minute), now.Add(time.Hour))
	base := "proto=tcp,soft,retrans=1"

	t.Run("optional", func(t *testing.T) {
		e := startTLSServer(t, false, ca, srvCert, srvKey)

		// xprtsec=tls: a TLS 1.3 session, the server's certificate checked
		o, _ := mountopts.Parse(base + ",xprtsec=tls")
		tcp, err := transport.TCPForMount("127.0.0.1", o, transport.TLSFiles{CA: ca.File})
		if err != nil {
			t.Fatal(err)
		}
		tcp.ProbeProg, tcp.ProbeVers = nfs3.Program, nfs3.Version
		rc, err := sunrpc.NewClient(sunrpc.TCPDialer("127.0.0.1:"+strconv.Itoa(e.ports.NFS), tcp), sunrpc.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rc.Null(ctx, nfs3.Program, nfs3.Version); err != nil {
			t.Fatal(err)
		}
		if st, ok := rc.TLSState(); !ok || st.Version != tls.VersionTLS13 || st.NegotiatedProtocol != sunrpc.ALPNProtocol {
			t.Fatalf("TLS state %v: version %#x, ALPN %q; want TLS 1.3, sunrpc", ok, st.Version, st.NegotiatedProtocol)
		}
		rc.Close()

		// ... without a client certificate the node is its address:
		// "byaddr" (granted to 127.0.0.1) mounts, "vol" (node-a) does not
		c, err := e.mount(t, "/byaddr", base+",xprtsec=tls", transport.TLSFiles{CA: ca.File})
		if err != nil {
			t.Fatal(err)
		}
		writeRead(t, c)
		c.Close()
		if _, err := e.mount(t, "/vol", base+",xprtsec=tls", transport.TLSFiles{CA: ca.File}); !errors.Is(err, mount3.ErrAccess) {
			t.Fatalf("vol of node-a mounted without its certificate: %v", err)
		}
		// a server certificate from another CA is refused by the client
		if _, err := e.mount(t, "/byaddr", base+",xprtsec=tls", transport.TLSFiles{CA: other.File}); !errors.Is(err, sunrpc.ErrTLSHandshake) {
			t.Fatalf("server certificate of another CA: %v", err)
		}

		// xprtsec=mtls with node-a's certificate: "vol" is granted by name
		c, err = e.mount(t, "/vol", base+",xprtsec=mtls", transport.TLSFiles{CA: ca.File, Cert: nodeA, Key: nodeAKey})
		if err != nil {
			t.Fatal(err)
		}
		writeRead(t, c)
		c.Close()

		// refused at the handshake: expired, another CA
		for name, f := range map[string]transport.TLSFiles{
			"expired":    {CA: ca.File, Cert: expired, Key: expiredKey},
			"another CA": {CA: ca.File, Cert: foreign, Key: foreignKey},
		} {
			_, err := e.mount(t, "/vol", base+",xprtsec=mtls", f)
			if !errors.Is(err, sunrpc.ErrTLSHandshake) {
				t.Fatalf("%s client certificate: %v, want %v", name, err, sunrpc.ErrTLSHandshake)
			}
		}
	})

	t.Run("rotation", func(t *testing.T) {
		// the server's and the node's certificate files are replaced in
		// place; the next connections present the new ones, no restart
		d := t.TempDir()
		sc, sk := filepath.Join(d, "server.pem"), filepath.Join(d, "server-key.pem")
		nc, nk := filepath.Join(d, "node.pem"), filepath.Join(d, "node-key.pem")
		install(t, srvCert, sc)
		install(t, srvKey, sk)
		install(t, nodeA, nc)
		install(t, nodeAKey, nk)
		e := startTLSServer(t, false, ca, sc, sk)
		serverName := func() string {
			t.Helper()
			o, _ := mountopts.Parse(base + ",xprtsec=tls")
			tcp, err := transport.TCPForMount("127.0.0.1", o, transport.TLSFiles{CA: ca.File})
			if err != nil {
				t.Fatal(err)
			}
			rc, err := sunrpc.NewClient(sunrpc.TCPDialer("127.0.0.1:"+strconv.Itoa(e.ports.NFS), tcp), sunrpc.ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := rc.Null(ctx, nfs3.Program, nfs3.Version); err != nil {
				t.Fatal(err)
			}
			st, _ := rc.TLSState()
			return st.PeerCertificates[0].Subject.CommonName
		}
		if n := serverName(); n != "nfs-server" {
			t.Fatalf("server certificate %q", n)
		}
		renewed, renewedKey := ca.Issue(t, "nfs-server-renewed", []net.IP{net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth, now.Add(-time.Minute), now.Add(time.Hour))
		install(t, renewedKey, sk)
		install(t, renewed, sc)
		if n := serverName(); n != "nfs-server-renewed" {
			t.Fatalf("server certificate after renewal %q", n)
		}

		c, err := e.mount(t, "/vol", base+",xprtsec=mtls", transport.TLSFiles{CA: ca.File, Cert: nc, Key: nk})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		// the node's files now name node-b: its next mount is node-b's,
		// which has no grant on vol
		nodeB, nodeBKey := ca.Issue(t, "node-b", nil, x509.ExtKeyUsageClientAuth, now.Add(-time.Minute), now.Add(time.Hour))
		install(t, nodeBKey, nk)
		install(t, nodeB, nc)
		if _, err := e.mount(t, "/vol", base+",xprtsec=mtls", transport.TLSFiles{CA: ca.File, Cert: nc, Key: nk}); !errors.Is(err, mount3.ErrAccess) {
			t.Fatalf("mount with the replaced node certificate: %v", err)
		}
	})

	t.Run("no-tls-server", func(t *testing.T) {
		e := startTLSServer(t, false, nil, "", "")
		_, err := e.mount(t, "/byaddr", base+",xprtsec=mtls", transport.TLSFiles{CA: ca.File, Cert: nodeA, Key: nodeAKey})
		if !errors.Is(err, sunrpc.ErrTLSRefused) || !strings.Contains(err.Error(), "refused RPC-with-TLS") {
			t.Fatalf("xprtsec=mtls against a server without TLS: %v, want %v", err, sunrpc.ErrTLSRefused)
		}
	})

	t.Run("required", func(t *testing.T) {
		e := startTLSServer(t, true, ca, srvCert, srvKey)
		// a plaintext client: every call denied AUTH_ERROR AUTH_TOOWEAK
		_, err := e.mount(t, "/byaddr", base, transport.TLSFiles{})
		var ae *sunrpc.AuthError
		if !errors.As(err, &ae) || ae.Stat != sunrpc.AuthTooWeak {
			t.Fatalf("plaintext client of a server requiring TLS: %v, want AUTH_TOOWEAK", err)
		}
		// xprtsec=tls without a certificate: refused at the handshake
		if _, err := e.mount(t, "/byaddr", base+",xprtsec=tls", transport.TLSFiles{CA: ca.File}); !errors.Is(err, sunrpc.ErrTLSHandshake) {
			t.Fatalf("no client certificate on a server requiring one: %v", err)
		}
		// node-a by its certificate: its volume mounts; the address alone
		// no longer grants "byaddr"
		c, err := e.mount(t, "/vol", base+",xprtsec=mtls", transport.TLSFiles{CA: ca.File, Cert: nodeA, Key: nodeAKey})
		if err != nil {
			t.Fatal(err)
		}
		writeRead(t, c)
		c.Close()
		if _, err := e.mount(t, "/byaddr", base+",xprtsec=mtls", transport.TLSFiles{CA: ca.File, Cert: nodeA, Key: nodeAKey}); !errors.Is(err, mount3.ErrAccess) {
			t.Fatalf("volume granted by address to a TLS-required server's client: %v", err)
		}
	})

	t.Run("required-rdma", func(t *testing.T) {
		testenv.NeedRoot(t, "the export server")
		cfg := Config{Root: t.TempDir(), Listen: "127.0.0.1", NLMPort: -1, RDMAPort: testenv.FreePort(t), TLSRequired: true}
		var err error
		if cfg.TLS, err = LoadTLS(srvCert, srvKey, ca.File, ""); err != nil {
			t.Fatal(err)
		}
		s, err := New(context.Background(), cfg)
		if err == nil {
			s.Close()
			t.Fatal("TLS required with NFS over RDMA on")
		}
		if !strings.Contains(err.Error(), "RDMA cannot carry RPC-with-TLS") {
			t.Fatalf("error %v does not say why", err)
		}
	})
}

// install copies file src over dst atomically (a new file renamed over
// it), as certificate agents and kubelet replace files.
func install(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}
