package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

// TestMemory: Mount.Memory follows what the mount holds: nodes in the tree
// until their names go, write data in flight and uncommitted until fsync,
// READDIRPLUS entries until closedir.
func TestMemory(t *testing.T) {
	needFUSE(t)
	s := startServer(t)
	dir, m := s.mount(t, mountopts.ProtoTCP, "")
	if got := m.Memory(); got.Inodes != 1 || got.WriteBehindBytes != 0 || got.UncommittedBytes != 0 || got.DirEntries != 0 || got.HeapBytes <= 0 {
		t.Fatalf("fresh mount: %+v", got)
	}
	const files = 50
	for i := range files {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Memory().Inodes; got != files+1 {
		t.Errorf("after %d creates: %d inodes, want %d", files, got, files+1)
	}

	// 4 MiB of writes: in flight, then acknowledged UNSTABLE and kept
	// until the fsync's COMMIT.
	f, err := os.OpenFile(filepath.Join(dir, "f0"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := bytes.Repeat([]byte("memory--"), (4<<20)/8)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	var got MemoryStats
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got = m.Memory()
		if got.WriteBehindBytes == 0 && got.UncommittedBytes == int64(len(data)) {
			break
		}
		if got.WriteBehindBytes+got.UncommittedBytes > int64(len(data)) || time.Now().After(deadline) {
			t.Fatalf("after a 4 MiB write: %+v", got)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := m.Memory(); got.WriteBehindBytes != 0 || got.UncommittedBytes != 0 {
		t.Fatalf("after fsync: %+v", got)
	}

	// a listing's entries are gone at closedir
	if _, err := os.ReadDir(dir); err != nil {
		t.Fatal(err)
	}
	if got := m.Memory(); got.DirEntries != 0 {
		t.Errorf("after closedir: %d READDIRPLUS entries kept", got.DirEntries)
	}

	// removed: their nodes leave the tree
	f.Close()
	for i := range files {
		if err := os.Remove(filepath.Join(dir, fmt.Sprintf("f%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Memory(); got.Inodes != 1 || got.DirEntries != 0 {
		t.Fatalf("after removing every file: %d inodes (want 1, the root), %d READDIRPLUS entries", got.Inodes, got.DirEntries)
	}
}
