//go:build ibverbs && cgo

package ibverbs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"golang.org/x/sys/unix"
)

// TestFileMR: an RDMA Write from a region over a file's mapping
// (verbs.RegFileMR: ibv_reg_mr over the mapped page cache) carries the
// file's bytes, and a pwrite to the file after registration is in the next
// Write; for a region with write access (a writable shared mapping) and
// for one without (read-only, as the NFS server registers READ data). A
// kernel before 6.2 cannot pin a read-only shared mapping (ib_umem_get
// asks FOLL_WRITE|FOLL_FORCE of a region without write access: EFAULT);
// there the read-only case is skipped, and the server registers a copy.
func TestFileMR(t *testing.T) {
	for _, tc := range []struct {
		name   string
		access verbs.Access
	}{{"read-only", 0}, {"writable", verbs.AccessLocalWrite}} {
		t.Run(tc.name, func(t *testing.T) { testFileMR(t, tc.access) })
	}
}

func testFileMR(t *testing.T, access verbs.Access) {
	const size = 1 << 20
	c, s := pair(t, nil)
	target := regMR(t, s.pd, size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	sendKey(t, s, c, target)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*13 + 1)
	}
	name := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, err := verbs.RegFileMR(c.pd, f, 0, size, access)
	if err != nil && access == 0 && errors.Is(err, syscall.EFAULT) && kernelBefore(t, 6, 2) {
		t.Skipf("a read-only shared mapping cannot be pinned by this kernel (before 6.2): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	mustPost(t, c.qp, &verbs.SendWR{ID: 7, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(0, size)}, RemoteAddr: target.Addr(), RKey: target.RKey()})
	mustOK(t, waitWC(t, c.cq), verbs.WCRDMAWrite, 7)
	if !bytes.Equal(target.Bytes(), data) {
		t.Fatal("RDMA Write from the file's mapping: target differs")
	}
	if _, err := f.WriteAt([]byte("changed through pwrite"), 4096); err != nil {
		t.Fatal(err)
	}
	copy(data[4096:], "changed through pwrite")
	mustPost(t, c.qp, &verbs.SendWR{ID: 8, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{src.SGE(0, size)}, RemoteAddr: target.Addr(), RKey: target.RKey()})
	mustOK(t, waitWC(t, c.cq), verbs.WCRDMAWrite, 8)
	if !bytes.Equal(target.Bytes(), data) {
		t.Fatal("the Write after a pwrite does not carry it")
	}
}

// TestProbeFileMR: verbs.ProbeFileMR, which the NFS/RDMA responder runs
// at start, reports what this kernel does with a read-only shared file
// mapping: refused (EFAULT) before Linux 6.2, registered since.
func TestProbeFileMR(t *testing.T) {
	name, _ := testDevice(t)
	e := newEnd(t, name)
	err := verbs.ProbeFileMR(e.pd)
	switch before := kernelBefore(t, 6, 2); {
	case before && !errors.Is(err, syscall.EFAULT):
		t.Fatalf("ProbeFileMR on a kernel before 6.2: %v, want EFAULT", err)
	case !before && err != nil:
		t.Fatalf("ProbeFileMR: %v, want the mapping registered", err)
	}
}

// kernelBefore reports whether the running kernel's release is before
// major.minor.
func kernelBefore(t *testing.T, major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		t.Fatalf("kernel release %q: %v", u.Release[:], err)
	}
	return ma < major || ma == major && mi < minor
}
