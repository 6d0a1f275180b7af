package fusefs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

// TestCallerCredential: NFS calls made for a process carry that process's
// uid, gid and groups, so the server's permission checks apply to it (as
// with a kernel NFS mount), not the mount's credential: a uid-1000 process
// is refused a root 0700 directory and creates files owned by uid 1000.
func TestCallerCredential(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	if err := os.Chmod(s.root, 0o755); err != nil {
		t.Fatal(err)
	}
	must(t, os.Mkdir(filepath.Join(s.root, "private"), 0o700))
	must(t, os.WriteFile(filepath.Join(s.root, "private", "secret"), []byte("root only"), 0o600))
	must(t, os.Mkdir(filepath.Join(s.root, "pub"), 0o777))
	must(t, os.Chmod(filepath.Join(s.root, "pub"), 0o777))
	must(t, os.WriteFile(filepath.Join(s.root, "pub", "readme"), []byte("for all"), 0o644))
	for _, proto := range []string{mountopts.ProtoTCP, mountopts.ProtoRDMA} {
		t.Run(proto, func(t *testing.T) {
			mnt, _ := s.mount(t, proto, "")
			// the temporary directories above the mount point are 0700
			for d := filepath.Dir(mnt); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
				must(t, os.Chmod(d, 0o755))
			}
			as1000 := func(name string, args ...string) (string, error) {
				cmd := exec.Command(name, args...)
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{1000}}}
				out, err := cmd.CombinedOutput()
				return string(out), err
			}
			// control: uid 1000 reaches the mount and reads what it may
			if out, err := as1000("/bin/cat", filepath.Join(mnt, "pub", "readme")); err != nil || out != "for all" {
				t.Fatalf("uid 1000 reading a 0644 file through the mount: %q, %v", out, err)
			}
			if out, err := as1000("/bin/cat", filepath.Join(mnt, "private", "secret")); err == nil || !strings.Contains(out, "ermission denied") {
				t.Fatalf("uid 1000 read a root 0700 directory's file through the mount: %q, %v", out, err)
			}
			name := "by1000-" + proto
			if out, err := as1000("/usr/bin/touch", filepath.Join(mnt, "pub", name)); err != nil {
				t.Fatalf("uid 1000 creating a file in a 0777 directory: %q, %v", out, err)
			}
			st, err := os.Stat(filepath.Join(s.root, "pub", name))
			if err != nil {
				t.Fatal(err)
			}
			if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1000 || sys.Gid != 1000 {
				t.Fatalf("file created by uid 1000 is owned by %d:%d on the server", sys.Uid, sys.Gid)
			}
			// root (the test process) still reads it
			if b, err := os.ReadFile(filepath.Join(mnt, "private", "secret")); err != nil || string(b) != "root only" {
				t.Fatalf("root reading: %q, %v", b, err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
