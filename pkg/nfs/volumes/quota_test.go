package volumes

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"golang.org/x/sys/unix"
)

// TestVolumeAcct checks the per-inode records without a server: adoption,
// growth seen between calls consuming the slack, the slack counting
// against the quota, forgetting, and rescans (a record of an inode no
// longer in the tree is dropped at the second walk that misses it).
func TestVolumeAcct(t *testing.T) {
	var v Volume
	v.quota.Store(100 << 10)
	a, b := inodeKey{1, 10}, inodeKey{1, 11}
	lock := func(f func()) { v.acct.mu.Lock(); f(); v.acct.mu.Unlock() }
	check := func(used, inodes, slack int64) {
		t.Helper()
		if v.used.Load() != used || v.inodes.Load() != inodes || v.slack.Load() != slack {
			t.Fatalf("used %d inodes %d slack %d; want %d, %d, %d", v.used.Load(), v.inodes.Load(), v.slack.Load(), used, inodes, slack)
		}
	}
	lock(func() { v.setLocked(a, 8192) })
	check(8192, 1, 0)
	lock(func() { v.setLocked(a, 16384); v.dirtyLocked(a, unix.FileHandle{}, 12288, 1<<20) })
	check(16384, 1, 12288)
	// writeback added a block: counted once, out of the slack
	st := unix.Stat_t{Dev: 1, Ino: 10, Blocks: 40}
	lock(func() { v.observeLocked(a, &st) })
	check(20480, 1, 8192)
	if !v.reserve(100<<10 - 20480 - 8192) {
		t.Fatal("a reservation up to the quota with the slack refused")
	}
	if v.reserve(1) {
		t.Fatal("a reservation past the quota with the slack granted")
	}
	v.release(100<<10 - 20480 - 8192)
	lock(func() { v.dirtyLocked(a, unix.FileHandle{}, 1<<20, 16384) }) // capped
	check(20480, 1, 16384)
	lock(func() { v.capSlackLocked(a, 4096) })
	check(20480, 1, 4096)
	lock(func() { v.setLocked(b, 4096) })
	check(24576, 2, 4096)
	lock(func() { v.forgetLocked(a) })
	check(4096, 1, 0)
	lock(func() { v.cleanLocked(b); v.forgetLocked(inodeKey{9, 9}) })
	check(4096, 1, 0)

	// rescans of a real tree: its inodes replace the records; b, not in
	// it, is kept by the first walk that misses it, dropped by the second
	root := t.TempDir()
	testenv.MustWrite(t, filepath.Join(root, "vol", "f"), bytes.Repeat([]byte("quota"), 2000))
	rootFD, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootFD)
	u, err := treeUsage(rootFD, "vol")
	if err != nil {
		t.Fatal(err)
	}
	missed, err := v.scanOnce(context.Background(), rootFD, "vol")
	if err != nil || !missed {
		t.Fatalf("first walk: missed %v, %v", missed, err)
	}
	check(u.bytes+4096, u.inodes+1, 0)
	missed, err = v.scanOnce(context.Background(), rootFD, "vol")
	if err != nil || missed {
		t.Fatalf("second walk: missed %v, %v", missed, err)
	}
	check(u.bytes, u.inodes, 0)
	lock(func() { v.setLocked(b, 4096) })
	if err := v.rescan(context.Background(), rootFD, "vol"); err != nil {
		t.Fatal(err)
	}
	check(u.bytes, u.inodes, 0)
	if err := v.rescan(context.Background(), rootFD, "missing"); err == nil {
		t.Fatal("rescan of a missing directory succeeded")
	}
	check(u.bytes, u.inodes, 0)
}
