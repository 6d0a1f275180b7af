//go:build ibverbs && cgo

package ibverbs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
)

// TestFileMR: an RDMA Write from a region over a file's mapping
// (verbs.RegFileMR: ibv_reg_mr over the mapped page cache) carries the
// file's bytes, and a pwrite to the file after registration is in the next
// Write.
func TestFileMR(t *testing.T) {
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
	src, err := verbs.RegFileMR(c.pd, f, 0, size, 0)
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
