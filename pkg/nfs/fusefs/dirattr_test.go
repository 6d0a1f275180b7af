package fusefs

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// TestDirChangeNoGetattr: creating, stat'ing and unlinking files in a
// directory costs no NFS GETATTR of the directory, though the kernel
// forgets its attributes after each change and checks permissions
// (default_permissions) before the next: the mount answers from the wcc
// data of its own CREATE and REMOVE replies.
func TestDirChangeNoGetattr(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	pc, wrap := countCalls()
	mnt, _ := s.mountWith(t, mountopts.ProtoRDMA, "acdirmin=30,acdirmax=30", wrap)
	d := filepath.Join(mnt, "d")
	must(t, os.Mkdir(d, 0o755))
	const files = 40
	before, creates := pc.get(nfs3.ProcGetattr), pc.get(nfs3.ProcCreate)
	for i := range files {
		f := filepath.Join(d, "f"+strconv.Itoa(i))
		must(t, os.WriteFile(f, nil, 0o644))
		if _, err := os.Stat(f); err != nil {
			t.Fatal(err)
		}
		must(t, os.Remove(f))
	}
	if got := pc.get(nfs3.ProcCreate) - creates; got != files {
		t.Fatalf("%d NFS CREATE calls for %d files: the counter does not see the mount's calls", got, files)
	}
	if got := pc.get(nfs3.ProcGetattr) - before; got > 2 {
		t.Errorf("%d NFS GETATTR calls for %d creates, stats and unlinks in one directory, want at most 2", got, files)
	}
	// the answers from the wcc data are the directory's attributes
	fi, err := os.Stat(d)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 || !fi.IsDir() {
		t.Errorf("directory mode %v after the changes, want a directory with 0755", fi.Mode())
	}
}
