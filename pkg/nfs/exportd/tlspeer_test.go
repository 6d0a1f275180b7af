package exportd

import (
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/tlspeer"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"k8s.io/klog/v2"
)

// TestKernelClientRPCWithTLS mounts our export server from Linux's NFS
// client (hack/tls-peer: Linux 6.12, tlshd of ktls-utils as the TLS
// client, trusting the test's authority) with mount -o
// vers=3,xprtsec=tls and mtls: the guest reads a file written here and
// writes one read here; its mount shows the policy, tlshd logged a TLS
// 1.3 session. Linux sends MNT in plaintext (fs/nfs/mount_clnt.c creates
// its RPC client without an xprtsec policy), so a volume granted by
// certificate name alone is refused to it at MNT, and a server requiring
// TLS (--tls=required) denies its MNT.
func TestKernelClientRPCWithTLS(t *testing.T) {
	p := tlspeer.Start(t)
	t.Logf("peer: %s", p.Versions)
	cert, key := p.Issue(t, "nfsrdma-server", []net.IP{net.ParseIP(tlspeer.HostIP), net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth)
	tlsCfg, err := LoadTLS(cert, key, p.CA, "")
	if err != nil {
		t.Fatal(err)
	}
	// serve starts the export server on 127.0.0.1 (the guest's 10.0.2.2)
	// with three volumes: "vol" granted to 127.0.0.1 (where the guest's
	// connections come from through qemu's user network), "byname"
	// granted to the guest's client certificate name only, "named"
	// granted to both.
	serve := func(t *testing.T, required bool) (Ports, string) {
		t.Helper()
		root := t.TempDir()
		s := serveVolumes(t, Config{Root: root, Listen: "127.0.0.1", NLMPort: -1, RDMAPort: 0, TLS: tlsCfg, TLSRequired: required},
			testVolume{"vol", admin.Access{Node: "guest@127.0.0.1", Addrs: []string{"127.0.0.1"}}},
			testVolume{"byname", admin.Access{Node: "tlspeer-client@10.9.9.9", Name: "tlspeer-client", Addrs: []string{"10.9.9.9"}}},
			testVolume{"named", admin.Access{Node: "tlspeer-client@127.0.0.1", Name: "tlspeer-client", Addrs: []string{"127.0.0.1"}}})
		return s.Ports(), root
	}
	// mount runs mount.nfs in the guest; it returns its output and status
	mount := func(t *testing.T, ports Ports, export, sec string) (string, int) {
		t.Helper()
		opts := fmt.Sprintf("vers=3,proto=tcp,port=%d,mountport=%d,mountproto=tcp,nolock,soft,timeo=100,retrans=1,retry=0,xprtsec=%s",
			ports.NFS, ports.Mount, sec)
		out, status, err := p.Run(fmt.Sprintf("mkdir -p /mnt/ours && timeout 60 mount -t nfs -o %s %s:%s /mnt/ours", opts, tlspeer.HostIP, export), 90*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if status == 0 {
			t.Cleanup(func() { _, _, _ = p.Run("umount -f /mnt/ours", time.Minute) })
		}
		return out, status
	}
	umount := func(t *testing.T) {
		t.Helper()
		p.Sh(t, "timeout 30 umount /mnt/ours")
	}
	readWrite := func(t *testing.T, root, vol, sec string) {
		t.Helper()
		want := "written by driver server's host for Linux over " + sec + "\n"
		if err := os.WriteFile(filepath.Join(root, vol, "ours.txt"), []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := p.Sh(t, "cat /mnt/ours/ours.txt"); got != want {
			t.Fatalf("the guest read %q, want %q", got, want)
		}
		p.Sh(t, "echo 'written by Linux' > /mnt/ours/linux.txt && sync")
		if b, err := os.ReadFile(filepath.Join(root, vol, "linux.txt")); err != nil || string(b) != "written by Linux\n" {
			t.Fatalf("the guest's file here: %q, %v", b, err)
		}
		if mi := p.Sh(t, "grep ' /mnt/ours ' /proc/self/mountinfo"); !strings.Contains(mi, "xprtsec="+sec) {
			t.Fatalf("the guest's mount does not show xprtsec=%s:\n%s", sec, mi)
		}
	}

	t.Run("optional", func(t *testing.T) {
		logs := testenv.CaptureKlog(t, 0)
		ports, root := serve(t, false)
		p.Sh(t, ": >/var/log/tlshd.log")
		if out, st := mount(t, ports, "/vol", "tls"); st != 0 {
			t.Fatalf("mount -o xprtsec=tls: status %d\n%s\ntlshd:\n%s", st, out, p.TLSHDLog(t))
		}
		readWrite(t, root, "vol", "tls")
		umount(t)
		if log := p.TLSHDLog(t); !strings.Contains(log, "Session description: (TLS1.3)") {
			t.Errorf("tlshd logged no TLS 1.3 session:\n%s", log)
		}

		if out, st := mount(t, ports, "/named", "mtls"); st != 0 {
			t.Fatalf("mount -o xprtsec=mtls: status %d\n%s\ntlshd:\n%s", st, out, p.TLSHDLog(t))
		}
		readWrite(t, root, "named", "mtls")
		umount(t)
		// our server's side of both: TLS 1.3, the second with tlshd's
		// client certificate verified
		klog.Flush()
		for _, want := range []string{`client="" verified=false version="TLS 1.3"`, `client="tlspeer-client" verified=true version="TLS 1.3"`} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("the server logged no session with %s:\n%s", want, logs.String())
			}
		}

		// granted by certificate name only: Linux's MNT in plaintext
		// is the address 127.0.0.1's, which has no grant
		out, st := mount(t, ports, "/byname", "mtls")
		if st == 0 || !strings.Contains(out, "access denied by server") {
			t.Fatalf("Linux mounting a volume granted by certificate name only (MNT in plaintext): status %d: %s", st, out)
		}
		t.Logf("mtls on a volume granted by name only: status %d: %s", st, strings.TrimSpace(out))
	})

	t.Run("required", func(t *testing.T) {
		// every plaintext call is denied AUTH_TOOWEAK: Linux's MNT too
		ports, _ := serve(t, true)
		out, st := mount(t, ports, "/named", "mtls")
		if st == 0 || !strings.Contains(out, "access denied by server") {
			t.Fatalf("Linux mounting a --tls=required server (MNT in plaintext): status %d: %s", st, out)
		}
		t.Logf("mtls against --tls=required: status %d: %s", st, strings.TrimSpace(out))
	})
}
