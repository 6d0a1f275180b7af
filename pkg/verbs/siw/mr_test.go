package siw

import (
	"bytes"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// TestRegMRReuse: a closed region's struct is handed out again by the next
// RegMR, under a new STag: the peer's RDMA Write under the new STag lands
// in the new memory, one under the closed region's STag is refused
// (Terminate) and places nothing, in the old memory nor in the new.
func TestRegMRReuse(t *testing.T) {
	c, s := pair(t, Config{}, Config{}, verbs.QPAttr{}, nil)
	src := regMR(t, c, 64, 0)
	copy(src.Bytes(), "new data")

	old := regMR(t, s, 64, allAccess)
	oldKey, oldAddr, oldBuf := old.RKey(), old.Addr(), old.Bytes()
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	old.Close() // closing again, before any RegMR, does nothing
	if old.Valid() {
		t.Fatal("closed region still valid")
	}
	newBuf := make([]byte, 64)
	nm, err := s.pd.RegMR(newBuf, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	if nm.(*mr) != old.(*mr) {
		t.Fatal("the closed region's struct was not reused")
	}
	if nm.RKey() == oldKey || !nm.Valid() || &nm.Bytes()[0] != &newBuf[0] || nm.Len() != len(newBuf) {
		t.Fatalf("reused region: STag 0x%08x (closed 0x%08x), valid %v", nm.RKey(), oldKey, nm.Valid())
	}

	if err := c.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, 8)}, RKey: nm.RKey(), RemoteAddr: nm.Addr()}); err != nil {
		t.Fatal(err)
	}
	notify(t, c, s)
	if string(newBuf[:8]) != "new data" {
		t.Fatalf("write under the new STag: %q", newBuf[:8])
	}
	clear(newBuf)
	if err := c.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, 8)}, RKey: oldKey, RemoteAddr: oldAddr}); err != nil {
		t.Fatal(err)
	}
	mustErrIs(t, waitDone(t, s), ErrTaggedSTag)
	zero := make([]byte, 64)
	if !bytes.Equal(oldBuf, zero) || !bytes.Equal(newBuf, zero) {
		t.Fatal("a write under a closed region's STag placed data")
	}
}

// TestRegMRNoAllocs: registering and closing a region per call does not
// allocate in the steady state, and every registration gets a new STag.
func TestRegMRNoAllocs(t *testing.T) {
	d := NewDevice(Config{})
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var prev uint32
	rotated := true
	allocs := testing.AllocsPerRun(100, func() {
		m, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		if m.RKey() == prev {
			rotated = false
		}
		prev = m.RKey()
		m.Close()
	})
	if !rotated {
		t.Fatal("a registration reused the STag of the one before")
	}
	if raceEnabled {
		t.Logf("%.1f allocations per registration (race detector on: not checked)", allocs)
	} else if allocs != 0 {
		t.Fatalf("%.1f allocations per registration, want 0", allocs)
	}
}
