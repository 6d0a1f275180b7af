package kernelpeer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// NSM's RPC program (rpc.statd) and NLM's (the kernel's lockd).
const (
	nsmProgram = 100024
	nlmProgram = 100021
)

var statdMu sync.Mutex

// StartStatd makes sure rpc.statd runs in the guest, as NLM locking
// needs: knfsd's lockd asks it to monitor (SM_MON) each client before it
// grants that client a lock, and the kernel NFS client asks it to
// monitor the server before its first lock. The peer's initramfs has no
// rpc.statd, so this host's /usr/sbin/rpc.statd and the shared libraries
// it uses (except the C library and the loader, which the guest has)
// are copied to the 9p share and started from there (`rpc.statd -L`, no
// sm-notify run). It skips t (fails it under CI=true) when this host has
// no rpc.statd (apt-get install nfs-common). A running statd is left
// running: it is a service of the guest, like rpcbind.
func StartStatd(t testing.TB) {
	t.Helper()
	statdMu.Lock()
	defer statdMu.Unlock()
	// The initramfs's root directory is mode 0700 (the cpio archive
	// keeps the mode of its mktemp -d build directory), so rpcbind,
	// which runs as _rpc, cannot read /etc/hosts.allow: its TCP
	// wrapper check then refuses every GETADDR and GETPORT from a
	// socket (AUTH_TOOWEAK; the kernel logs "server rpc.statd requires
	// stronger authentication" and lockd cannot reach statd). Only
	// requests over rpcbind's AF_LOCAL socket pass.
	Sh(t, "chmod 755 /")
	if registered(t, nsmProgram) {
		return
	}
	bin, err := exec.LookPath("rpc.statd")
	if err != nil {
		bin = "/usr/sbin/rpc.statd"
		if _, err := os.Stat(bin); err != nil {
			skipOrFail(t, "rpc.statd not found on this host (apt-get install nfs-common): it is run in the kernel peer for NLM")
		}
	}
	share := Env(t, "KP_SHARE")["KP_SHARE"]
	dst := filepath.Join(share, "statd")
	if err := os.MkdirAll(filepath.Join(dst, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, bin, filepath.Join(dst, "rpc.statd"), 0o755)
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", bin, err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		_, after, ok := strings.Cut(l, "=> ")
		if !ok {
			continue
		}
		lib := strings.Fields(after)[0]
		if base := filepath.Base(lib); strings.HasPrefix(base, "libc.so") || strings.HasPrefix(base, "ld-linux") || !filepath.IsAbs(lib) {
			continue
		}
		copyFile(t, lib, filepath.Join(dst, "lib", filepath.Base(lib)), 0o644)
	}
	Sh(t, "mkdir -p /var/lib/nfs/sm /var/lib/nfs/sm.bak && LD_LIBRARY_PATH=/host/statd/lib /host/statd/rpc.statd -L")
	for deadline := time.Now().Add(10 * time.Second); !registered(t, nsmProgram); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("kernel peer: rpc.statd started but is not registered with the guest's rpcbind")
		}
	}
}

// registered reports whether prog is registered with the guest's rpcbind.
func registered(t testing.TB, prog int) bool {
	t.Helper()
	for _, l := range strings.Split(Sh(t, "rpcinfo -p"), "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[0] == itoa(prog) {
			return true
		}
	}
	return false
}

func copyFile(t testing.TB, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

func skipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}
