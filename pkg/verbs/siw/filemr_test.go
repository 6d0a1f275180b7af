package siw

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// TestFileMR sends from a region over a file's mapping (verbs.RegFileMR):
// an RDMA Write and a Send carry the file's bytes (the CRC32c computed
// over the mapped pages; the peer checks it), a pwrite to the file is seen
// by the next Write (the page cache is shared); after the file is
// truncated below the region, a Write from the pages past its end
// completes with a local protection error and moves the QP to error, and
// the process lives on (the fault is caught, not a SIGBUS).
func TestFileMR(t *testing.T) {
	const size = 256 << 10
	name := filepath.Join(t.TempDir(), "f")
	data := make([]byte, size)
	fill(data, 9)
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// each transfer lands in a region of its own: the race detector
	// does not see the ordering the TCP stream gives
	var rb [2]verbs.MR
	c, s := pair(t, Config{}, Config{}, verbs.QPAttr{}, func(s *end) {
		for i := range rb {
			rb[i] = regMR(t, s, size, verbs.AccessLocalWrite)
			if err := s.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{rb[i].SGE(0, size)}}); err != nil {
				t.Fatal(err)
			}
		}
	})
	if _, err := verbs.RegFileMR(c.pd, f, 100, size, 0); !errors.Is(err, verbs.ErrInvalidWR) {
		t.Fatalf("unaligned offset: %v, want ErrInvalidWR", err)
	}
	fmr, err := verbs.RegFileMR(c.pd, f, 0, size, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fmr.Close()
	remote := [2]verbs.MR{regMR(t, s, size, verbs.AccessRemoteWrite), regMR(t, s, size, verbs.AccessRemoteWrite)}
	write := func(id uint64, remote verbs.MR) verbs.WC {
		t.Helper()
		if err := c.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{fmr.SGE(0, size)}, RKey: remote.RKey(), RemoteAddr: remote.Addr()}); err != nil {
			t.Fatal(err)
		}
		return waitWC(t, c.scq)
	}
	// send the region; the Send's arrival also means the Write before it
	// is placed (RDMAP ordering)
	send := func(id uint64) {
		t.Helper()
		if err := c.qp.PostSend(&verbs.SendWR{ID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{fmr.SGE(0, size)}}); err != nil {
			t.Fatal(err)
		}
		wantOK(t, waitWC(t, c.scq), verbs.WCSend)
		wantOK(t, waitWC(t, s.rcq), verbs.WCRecv)
	}
	wantOK(t, write(1, remote[0]), verbs.WCRDMAWrite)
	send(10)
	if !bytes.Equal(remote[0].Bytes(), data) || !bytes.Equal(rb[0].Bytes(), data) {
		t.Fatal("RDMA Write and Send from the file's mapping: data differs")
	}
	if _, err := f.WriteAt([]byte("changed through pwrite"), 4096); err != nil {
		t.Fatal(err)
	}
	copy(data[4096:], "changed through pwrite")
	wantOK(t, write(2, remote[1]), verbs.WCRDMAWrite)
	send(11)
	if !bytes.Equal(remote[1].Bytes(), data) || !bytes.Equal(rb[1].Bytes(), data) {
		t.Fatal("the Write after a pwrite does not carry it")
	}
	if err := f.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	wc := write(3, regMR(t, s, size, verbs.AccessRemoteWrite)) // not read here: it may be placed in part
	if wc.Status != verbs.WCLocProtErr {
		t.Fatalf("Write from pages past the end: %+v, want a local protection error", wc)
	}
	if err := waitDone(t, c); !errors.Is(err, verbs.ErrLocalError) {
		t.Fatalf("QP error %v, want ErrLocalError", err)
	}
}

// TestProbeFileMR: software iWARP registers a read-only shared file
// mapping (verbs.ProbeFileMR), so the NFS/RDMA responder sends READ data
// from the page cache in place.
func TestProbeFileMR(t *testing.T) {
	pd, err := NewDevice(Config{}).AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	if err := verbs.ProbeFileMR(pd); err != nil {
		t.Fatal("ProbeFileMR:", err)
	}
}
