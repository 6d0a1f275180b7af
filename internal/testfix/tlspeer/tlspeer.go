// Package tlspeer gives tests a Linux NFS peer that speaks RPC-with-TLS
// (RFC 9289): the Debian trixie guest of hack/tls-peer (Linux 6.12 knfsd,
// rpc.mountd, rpcbind and tlshd of ktls-utils under qemu), with a
// certificate authority of the test's own whose certificates tlshd presents
// and trusts. Start boots the guest (building it first when its cache is
// cold) or takes the running one, and installs fresh certificates in it.
// It skips with -short; without root or qemu it skips, and so when the
// guest cannot be built or booted (no network for debootstrap); under
// CI=true those are failures.
package tlspeer

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testpki"
)

// GuestIP is the guest's address on its user-mode network; HostIP is this
// host's loopback as the guest reaches it (qemu user networking).
const (
	GuestIP = "10.0.2.15"
	HostIP  = "10.0.2.2"
)

// Peer is the running guest: where its services are forwarded on this
// host, and the PEM files of the test's certificate authority.
type Peer struct {
	// Host is the address its ports are forwarded on (127.0.0.1); NFSPort
	// (knfsd, NFSv3 over TCP), MountPort (rpc.mountd) and RPCBindPort the
	// forwarded ports.
	Host                            string
	NFSPort, MountPort, RPCBindPort int
	// CA is the certificate authority's PEM file: tlshd trusts it for
	// servers' and clients' certificates.
	CA string
	// Versions names the guest's kernel, ktls-utils, nfs-utils and GnuTLS
	// versions ("kernel=6.12.117+deb13-amd64 ktls-utils=1.0.0-1 ...").
	Versions string

	dir   string // certificates written by this package
	ca    *testpki.CA
	shell string // the command channel, host:port
}

var (
	mu     sync.Mutex
	booted bool // this test binary booted the guest
)

func skip(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal("tls peer: " + why)
	}
	t.Skip("tls peer: " + why)
}

// Script is the path of hack/tls-peer.
func Script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "hack", "tls-peer")
}

// Start returns the peer: the running guest (hack/test boots it for all
// packages), or one it boots (hack/tls-peer start, building the guest
// first with a cold cache; at most 30 minutes) and stops when t ends. Each
// call issues a new authority and certificates (knfsd's server certificate
// "tlspeer" for 127.0.0.1 and 10.0.2.15, the guest client's
// "tlspeer-client") and restarts tlshd with them.
func Start(t testing.TB) *Peer {
	t.Helper()
	if testing.Short() {
		t.Skip("tls peer: not with -short (boots a VM)")
	}
	if os.Geteuid() != 0 {
		skip(t, "needs root (debootstrap, mke2fs -d)")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		skip(t, "needs qemu-system-x86_64")
	}
	mu.Lock()
	defer mu.Unlock()
	p := &Peer{Host: "127.0.0.1", dir: t.TempDir()}
	envLines, err := run(30*time.Minute, Script(), "env")
	if err != nil {
		out, err := run(30*time.Minute, Script(), "start")
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("hack/tls-peer start: %v\n%s", err, out)
			}
			t.Skipf("hack/tls-peer start failed (cannot build or boot the guest here): %v\n%s", err, tail(out, 30))
		}
		booted = true
		t.Cleanup(stopIfBooted)
		envLines = out
	}
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(envLines))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	p.NFSPort, _ = strconv.Atoi(env["TLSPEER_NFS_PORT"])
	p.MountPort, _ = strconv.Atoi(env["TLSPEER_MOUNT_PORT"])
	p.RPCBindPort, _ = strconv.Atoi(env["TLSPEER_RPCBIND_PORT"])
	p.shell = net.JoinHostPort(p.Host, env["TLSPEER_SHELL_PORT"])
	p.Versions = env["TLSPEER_VERSIONS"]
	share := env["TLSPEER_SHARE"]
	if p.NFSPort == 0 || p.MountPort == 0 || env["TLSPEER_SHELL_PORT"] == "" || share == "" {
		t.Fatalf("hack/tls-peer: incomplete env:\n%s", envLines)
	}
	p.newCA(t)
	certs := filepath.Join(share, "certs")
	if err := os.MkdirAll(certs, 0o700); err != nil {
		t.Fatal(err)
	}
	srv, srvKey := p.Issue(t, "tlspeer", []net.IP{net.ParseIP(GuestIP), net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth)
	cli, cliKey := p.Issue(t, "tlspeer-client", nil, x509.ExtKeyUsageClientAuth)
	for dst, src := range map[string]string{"ca.pem": p.CA, "server.pem": srv, "server-key.pem": srvKey, "client.pem": cli, "client-key.pem": cliKey} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certs, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p.Sh(t, "tlspeer-certs")
	return p
}

func stopIfBooted() {
	if booted {
		booted = false
		_, _ = run(time.Minute, Script(), "stop")
	}
}

func run(d time.Duration, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("%s %s: timeout after %v", name, strings.Join(args, " "), d)
	}
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func (p *Peer) newCA(t testing.TB) {
	t.Helper()
	p.ca = testpki.New(t, p.dir, "tlspeer")
	p.CA = p.ca.File
}

// NewAuthority writes the certificate of a new authority named name, one
// the peer does not know, and returns its PEM file.
func NewAuthority(t testing.TB, name string) string {
	t.Helper()
	return testpki.New(t, t.TempDir(), name).File
}

// Issue writes a certificate of the peer's authority for name (its CN and
// DNS subjectAltName; ips its IP subjectAltNames) with the extended key
// usage usage, valid for a day, and its key; it returns the PEM files.
func (p *Peer) Issue(t testing.TB, name string, ips []net.IP, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	return p.ca.Issue(t, name, ips, usage, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// rcMarker ends the output of a command (hack/tlspeer/cmd).
const rcMarker = "\n__TLSPEER_RC__ "

// Run runs cmd in the guest as root (sh -c, stderr into stdout) within d
// and returns its output and exit status; err reports a guest that cannot
// be reached or did not finish in time.
func (p *Peer) Run(cmd string, d time.Duration) (out string, status int, err error) {
	c, err := net.DialTimeout("tcp", p.shell, 10*time.Second)
	if err != nil {
		return "", -1, fmt.Errorf("guest command channel: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := io.WriteString(c, base64.StdEncoding.EncodeToString([]byte(cmd))+"\n"); err != nil {
		return "", -1, fmt.Errorf("guest command channel: %w", err)
	}
	b, err := io.ReadAll(c)
	s := string(b)
	i := strings.LastIndex(s, rcMarker)
	if i < 0 {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return s, -1, fmt.Errorf("guest command %q did not finish: %w", cmd, err)
	}
	status, _ = strconv.Atoi(strings.TrimSpace(s[i+len(rcMarker):]))
	return s[:i], status, nil
}

// Sh runs cmd in the guest (at most a minute) and returns its output; an
// exit status other than 0 fails t.
func (p *Peer) Sh(t testing.TB, cmd string) string {
	t.Helper()
	out, status, err := p.Run(cmd, time.Minute)
	if err != nil || status != 0 {
		t.Fatalf("in the guest: %q: status %d, %v\n%s", cmd, status, err, out)
	}
	return out
}

// TLSHDLog returns tlshd's log in the guest (its handshakes, GnuTLS's
// messages).
func (p *Peer) TLSHDLog(t testing.TB) string {
	t.Helper()
	return p.Sh(t, "cat /var/log/tlshd.log")
}
