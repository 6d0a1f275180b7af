package client

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/tlspeer"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/transport"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"k8s.io/klog/v2"
)

// TestKnfsdRPCWithTLS mounts Linux knfsd (hack/tls-peer: Linux 6.12, tlshd
// of ktls-utils) over TCP with RPC-with-TLS: xprtsec=tls, then mtls with a
// client certificate, on /export (exported xprtsec=tls:mtls): MOUNT,
// GETATTR, a file written and read back, its bytes checked in the guest;
// a NULL call's session is TLS 1.3 with knfsd's certificate, and tlshd
// logged the handshakes. Exports whose xprtsec does not admit the session,
// a server certificate of another authority and a knfsd without tlshd fail
// with our errors.
func TestKnfsdRPCWithTLS(t *testing.T) {
	p := tlspeer.Start(t)
	t.Logf("peer: %s", p.Versions)
	host := p.Host
	mount := func(t *testing.T, export, sec string, f transport.TLSFiles) (*Client, error) {
		t.Helper()
		o, err := mountopts.Parse("proto=tcp,soft,retrans=1,xprtsec=" + sec)
		if err != nil {
			t.Fatal(err)
		}
		tcp, err := transport.TCPForMount(host, o, f)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		return Mount(ctx, Options{
			Server: host, NFSPort: p.NFSPort, MountPort: p.MountPort, Export: export,
			AuthSys: sunrpc.AuthSysParams{MachineName: "nfsrdma-test"},
			Retry:   sunrpc.RetryPolicy{Soft: true, Retries: 1, Timeout: 20 * time.Second},
			TCP:     tcp,
		})
	}

	t.Run("tls", func(t *testing.T) {
		logs := testenv.CaptureKlog(t, 0)
		c, err := mount(t, "/export", "tls", transport.TLSFiles{CA: p.CA})
		if err != nil {
			t.Fatal("mount knfsd with xprtsec=tls:", err)
		}
		defer c.Unmount(context.Background())
		writeReadBack(t, p, c, "/export")
		// rpc.mountd (libtirpc) answers the AUTH_TLS probe
		// AUTH_REJECTEDCRED: MNT went in plaintext, NFS in TLS
		klog.Flush()
		if !strings.Contains(logs.String(), LogMountPlaintext) {
			t.Errorf("no %q in the log:\n%s", LogMountPlaintext, logs.String())
		}
	})

	t.Run("mtls", func(t *testing.T) {
		cert, key := p.Issue(t, "nfsrdma-node", nil, x509.ExtKeyUsageClientAuth)
		p.Sh(t, ": >/var/log/tlshd.log")
		for _, export := range []string{"/export", "/mtls"} {
			c, err := mount(t, export, "mtls", transport.TLSFiles{CA: p.CA, Cert: cert, Key: key})
			if err != nil {
				t.Fatalf("mount knfsd's %s with xprtsec=mtls: %v", export, err)
			}
			writeReadBack(t, p, c, export)
			if err := c.Unmount(context.Background()); err != nil {
				t.Error(err)
			}
		}
		// knfsd's tlshd verified our certificate
		if log := p.TLSHDLog(t); !strings.Contains(log, "The peer offered 1 certificate(s).") || !strings.Contains(log, "The certificate is trusted.") {
			t.Errorf("tlshd did not log our client certificate as offered and trusted:\n%s", log)
		}
	})

	t.Run("export-without-xprtsec", func(t *testing.T) {
		// knfsd's default for an export without the option: every mode
		c, err := mount(t, "/any", "tls", transport.TLSFiles{CA: p.CA})
		if err != nil {
			t.Fatal("mount knfsd's /any with xprtsec=tls:", err)
		}
		writeReadBack(t, p, c, "/any")
		if err := c.Unmount(context.Background()); err != nil {
			t.Error(err)
		}
	})

	t.Run("session", func(t *testing.T) {
		// a NULL call over knfsd's RPC-with-TLS: the session our client
		// negotiated with tlshd
		o, _ := mountopts.Parse("proto=tcp,xprtsec=tls")
		tcp, err := transport.TCPForMount(host, o, transport.TLSFiles{CA: p.CA})
		if err != nil {
			t.Fatal(err)
		}
		tcp.ProbeProg, tcp.ProbeVers = nfs3.Program, nfs3.Version
		rc, err := sunrpc.NewClient(sunrpc.TCPDialer(net.JoinHostPort(host, strconv.Itoa(p.NFSPort)), tcp), sunrpc.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p.Sh(t, ": >/var/log/tlshd.log")
		if err := rc.Null(ctx, nfs3.Program, nfs3.Version); err != nil {
			t.Fatal(err)
		}
		st, ok := rc.TLSState()
		if !ok || st.Version != tls.VersionTLS13 {
			t.Fatalf("TLS state %v, version %#x; want TLS 1.3", ok, st.Version)
		}
		if cn := st.PeerCertificates[0].Subject.CommonName; cn != "tlspeer" {
			t.Fatalf("server certificate %q, want knfsd's (tlspeer)", cn)
		}
		t.Logf("session: %s, cipher %s, ALPN %q", tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite), st.NegotiatedProtocol)
		// and as tlshd (GnuTLS) saw it
		if log := p.TLSHDLog(t); !strings.Contains(log, "Session description: (TLS1.3)") {
			t.Errorf("tlshd logged no TLS 1.3 session:\n%s", log)
		}
	})

	t.Run("refused", func(t *testing.T) {
		// knfsd answers the calls of a session its export's xprtsec does
		// not admit NFS3ERR_ACCES (nfserr_wrongsec)
		for _, m := range []struct{ export, sec string }{
			{"/plain", "tls"}, // xprtsec=none: plaintext only
			{"/mtls", "tls"},  // a client certificate required
		} {
			_, err := mount(t, m.export, m.sec, transport.TLSFiles{CA: p.CA})
			if !errors.Is(err, nfs3.ErrAccess) {
				t.Fatalf("%s with xprtsec=%s: %v, want %v", m.export, m.sec, err, nfs3.ErrAccess)
			}
			t.Logf("%s with xprtsec=%s: %v", m.export, m.sec, err)
		}
	})

	t.Run("server-of-another-authority", func(t *testing.T) {
		other := tlspeer.NewAuthority(t, "other-ca")
		_, err := mount(t, "/export", "tls", transport.TLSFiles{CA: other})
		if !errors.Is(err, sunrpc.ErrTLSHandshake) {
			t.Fatalf("knfsd's certificate checked against another CA: %v, want %v", err, sunrpc.ErrTLSHandshake)
		}
	})

	t.Run("no-tlshd", func(t *testing.T) {
		// knfsd offers STARTTLS whether or not tlshd runs; without it
		// the kernel's handshake request fails (ESRCH: no agent) and
		// knfsd reads our ClientHello as an RPC record ("fragment too
		// large") and closes the connection: to our client a connection
		// that failed in the handshake (retried, not ErrTLSHandshake)
		p.Sh(t, "kill $(pgrep -x tlshd)")
		defer p.Sh(t, "tlspeer-certs")
		_, err := mount(t, "/export", "tls", transport.TLSFiles{CA: p.CA})
		if !errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "TLS handshake with") {
			t.Fatalf("knfsd without tlshd: %v, want the connection closed in the TLS handshake", err)
		}
		if dmesg := p.Sh(t, "dmesg | tail -n 5"); !strings.Contains(dmesg, "RPC fragment too large") {
			t.Errorf("knfsd did not log reading the ClientHello as an RPC record:\n%s", dmesg)
		}
		t.Logf("knfsd without tlshd: %v", err)
	})
}

// writeReadBack writes a file of 1 MiB on c's export, reads it back, and
// checks its GETATTR size and its bytes in the guest's directory dir.
func writeReadBack(t *testing.T, p *tlspeer.Peer, c *Client, dir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Getattr(ctx, c.Root()); err != nil {
		t.Fatal("GETATTR of the root:", err)
	}
	name := fmt.Sprintf("ours-%d", time.Now().UnixNano())
	data := bytes.Repeat([]byte("RPC-with-TLS to knfsd\n"), 1<<20/22)
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
	got := make([]byte, len(data)+1)
	if n, err := c.ReadAt(ctx, fh, got, 0); n != len(data) || err != io.EOF {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	if !bytes.Equal(got[:len(data)], data) {
		t.Fatal("read back differs")
	}
	a, err := c.Getattr(ctx, fh)
	if err != nil || a.Size != uint64(len(data)) {
		t.Fatalf("GETATTR: size %d, %v; want %d", a.Size, err, len(data))
	}
	sum := md5.Sum(data)
	if out := p.Sh(t, "md5sum < "+dir+"/"+name); !strings.HasPrefix(out, hex.EncodeToString(sum[:])+" ") {
		t.Fatalf("in the guest: md5sum %q, want %x", out, sum)
	}
}
