package fusefs

import (
	"runtime/metrics"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// MemoryStats is what one mount holds now (see the package doc, Memory):
// the parts this package bounds, each with its bound, and the whole Go
// heap of the process (a `driver mount` process serves one mount).
type MemoryStats struct {
	// WriteBehindBytes: copies of FUSE write data in flight to the
	// server, not yet acknowledged, in bytes; at most
	// MountWriteBehindBytes.
	WriteBehindBytes int64
	// UncommittedBytes: data acknowledged UNSTABLE and kept for a re-send
	// until COMMIT, in bytes; past MountDirtyBytes a background COMMIT of
	// every dirty file starts (and FileUncommittedBytes bounds each file).
	UncommittedBytes int64
	// Inodes: nodes in the mount's tree (one handle and attributes
	// each): every name the kernel looked up, until its FORGET or the
	// name's removal (a node still open after an unlink is not counted).
	// Counted by walking the tree, O(Inodes).
	Inodes int64
	// DirEntries: READDIRPLUS entries kept for open directory streams and
	// for the LOOKUPs that follow a listing, one reply (at most 1 MiB)
	// per open directory; and the names of directories whose whole
	// listing is known (at most MaxDirNames per directory, dirnames.go).
	DirEntries int64
	// AccessEntries: NFS ACCESS answers kept per inode and credential for
	// permission checks (access.go), at most MaxAccessCreds per inode.
	AccessEntries int64
	// HeapBytes: the process's Go heap in use, in bytes (runtime/metrics
	// /memory/classes/heap/objects:bytes), everything this mount's
	// process holds in Go objects: the above, the NFS client's buffers,
	// the RPC transport's and go-fuse's request buffers.
	HeapBytes int64
	// Write counts the write path's verifier changes and re-sent bytes
	// (client.WriteStats).
	Write client.WriteStats
}

var _ fs.NodeOnForgetter = (*node)(nil)

// OnForget: the kernel forgot n (FORGET) and go-fuse dropped it; its
// READDIRPLUS entries, known names and ACCESS answers go with it.
func (n *node) OnForget() {
	n.mu.Lock()
	n.setPlusLocked(nil)
	n.setNamesLocked(nil)
	n.dropAccessLocked()
	n.mu.Unlock()
}

// setPlusLocked replaces n's READDIRPLUS entries, keeping DirEntries.
// Called with n.mu held.
func (n *node) setPlusLocked(plus map[string]nfs3.EntryPlus) {
	n.sys.dirEntries.Add(int64(len(plus) - len(n.plus)))
	n.plus = plus
}

// Memory reports what the mount holds now (see MemoryStats).
func (m *Mount) Memory() MemoryStats {
	b := m.sys.budget
	b.mu.Lock()
	wb, dirty := b.inflight, b.dirty
	b.mu.Unlock()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	var heap int64
	if s[0].Value.Kind() == metrics.KindUint64 {
		heap = int64(s[0].Value.Uint64())
	}
	return MemoryStats{
		WriteBehindBytes: int64(wb),
		UncommittedBytes: int64(dirty),
		Inodes:           m.inodes(),
		DirEntries:       m.sys.dirEntries.Load(),
		AccessEntries:    m.sys.accessEntries.Load(),
		HeapBytes:        heap,
		Write:            m.Client.WriteStats(),
	}
}

// inodes counts the nodes of the mount's tree, the root included: each
// inode once, however many names (hard links) lead to it.
func (m *Mount) inodes() int64 {
	root := m.sys.root.EmbeddedInode()
	seen := map[*fs.Inode]struct{}{root: {}}
	stack := []*fs.Inode{root}
	for len(stack) > 0 {
		in := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, ch := range in.Children() {
			if _, ok := seen[ch]; !ok {
				seen[ch] = struct{}{}
				stack = append(stack, ch)
			}
		}
	}
	return int64(len(seen))
}
