package mounter

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// fuseOf finds a process's /dev/fuse descriptor by its device, also when
// it was opened under another path (a device node of another container's
// /dev, which is what a handed-over descriptor shows here): the mounter
// must hold its duplicate of every taken-over connection. (There readlink
// of /proc/PID/fd/N shows "/": the device node of a container's /dev
// that is gone.)
func TestFuseOfOtherPath(t *testing.T) {
	testenv.NeedRootFUSE(t)
	if f, err := fuseOf(os.Getpid()); err == nil {
		f.Close()
		t.Skip("this test process holds another /dev/fuse descriptor already")
	}
	node := filepath.Join(t.TempDir(), "fuse")
	if err := unix.Mknod(node, unix.S_IFCHR|0o600, int(fuseDev)); err != nil {
		t.Fatalf("mknod: %v", err)
	}
	f, err := os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dup, err := fuseOf(os.Getpid())
	if err != nil {
		t.Fatalf("fuseOf: %v", err)
	}
	defer dup.Close()
	var a, b unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(int(dup.Fd()), &b); err != nil {
		t.Fatal(err)
	}
	if b.Rdev != fuseDev || a.Ino != b.Ino {
		t.Fatalf("duplicate is device %x inode %d, want the descriptor opened (device %x inode %d)", b.Rdev, b.Ino, a.Rdev, a.Ino)
	}
}
