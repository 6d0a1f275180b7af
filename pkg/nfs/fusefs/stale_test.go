package fusefs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

// TestRemovedByAnotherMount: a file that another client removed, whose
// name this mount still knows (a fresh walk cache in a directory not
// searchable by all, so each walk reaches Lookup), is found gone when it
// is opened again: the open's ESTALE makes the kernel walk again, and that
// walk must LOOKUP the server rather than find the stale node, so stat
// says ENOENT and O_CREAT makes a new file, as on Linux NFS. SQLite's
// rollback journal is made and removed this way by each writer.
func TestRemovedByAnotherMount(t *testing.T) {
	needFUSE(t)
	srv := startServer(t)
	if err := os.Chmod(srv.root, 0o700); err != nil {
		t.Fatal(err)
	}
	d1, _ := srv.mount(t, mountopts.ProtoTCP, "")
	d2, _ := srv.mount(t, mountopts.ProtoTCP, "")
	p1, p2 := filepath.Join(d1, "journal"), filepath.Join(d2, "journal")
	for round := range 3 {
		if err := os.WriteFile(p1, []byte("one"), 0o644); err != nil {
			t.Fatalf("round %d: create through mount 1: %v", round, err)
		}
		if _, err := os.Stat(p1); err != nil {
			t.Fatalf("round %d: stat through mount 1: %v", round, err)
		}
		if err := os.Remove(p2); err != nil {
			t.Fatalf("round %d: remove through mount 2: %v", round, err)
		}
		f, err := os.OpenFile(p1, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatalf("round %d: open O_CREAT of a name another mount removed: %v", round, err)
		}
		f.Close()
		if err := os.Remove(p1); err != nil {
			t.Fatalf("round %d: remove through mount 1: %v", round, err)
		}
	}
}
