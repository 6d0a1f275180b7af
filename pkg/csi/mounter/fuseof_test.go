package mounter

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// fuseOf finds the FUSE device among a process's descriptors by its device
// number, whatever path the descriptor's link shows: one opened through
// another node (as in another container's /dev) is found too, and a
// descriptor of another device is not taken for it.
func TestFuseOfByDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mknod)")
	}
	dir := t.TempDir()
	node := filepath.Join(dir, "not-dev-fuse")
	if err := unix.Mknod(node, unix.S_IFCHR|0o600, int(unix.Mkdev(fuseMajor, fuseMinor))); err != nil {
		t.Skipf("mknod: %v", err)
	}
	f, err := os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		t.Skipf("open the FUSE device through %s: %v (a nodev file system?)", node, err)
	}
	defer f.Close()
	if l, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd()))); l == "/dev/fuse" {
		t.Fatalf("the descriptor's link reads %q: the test would not tell the device from its path", l)
	}
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
	if a.Rdev != b.Rdev || a.Ino != b.Ino {
		t.Fatalf("fuseOf returned another file (rdev %x ino %d), not the FUSE device (rdev %x ino %d)", b.Rdev, b.Ino, a.Rdev, a.Ino)
	}
	// another character device (/dev/null) is not the FUSE device
	if isFuseDev("/dev/null") {
		t.Fatal("/dev/null taken for the FUSE device")
	}
}
