package fusefs

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

// TestReaddirReadChunks lists a directory of 3,000 entries through FUSE
// mounts over RPC-over-RDMA version 2 (our export server, software
// iWARP): with responder-provided Read chunks (the default, rprc) the
// READDIRPLUS replies too large for inline come in Read chunks the client
// pulls; with norprc they come in the Reply chunks the client offers, and
// no Read chunk is exposed.
func TestReaddirReadChunks(t *testing.T) {
	needFUSE(t)
	srv := startServer(t)
	const n = 3000
	for i := range n {
		if err := os.WriteFile(filepath.Join(srv.root, "entry-"+strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, extra := range []string{"", "norprc"} {
		t.Run("opts="+extra, func(t *testing.T) {
			before := srv.rdma.Metrics()
			dir, _ := srv.mount(t, mountopts.ProtoRDMA, extra)
			ents, err := os.ReadDir(dir)
			if err != nil || len(ents) != n {
				t.Fatalf("%d entries, %v", len(ents), err)
			}
			m := srv.rdma.Metrics()
			reads, replies := m.ReplyReadChunks-before.ReplyReadChunks, m.ReplyChunks-before.ReplyChunks
			t.Logf("replies in Read chunks %d, in Reply chunks %d", reads, replies)
			if extra == "" && (reads == 0 || replies != 0) || extra == "norprc" && (reads != 0 || replies == 0) {
				t.Fatalf("%s: %d replies in Read chunks, %d in Reply chunks", extra, reads, replies)
			}
		})
	}
}
