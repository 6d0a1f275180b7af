package fusefs

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"k8s.io/klog/v2"
)

// The state map is what a mount process that dies without a handover
// leaves for the process that takes its FUSE connection up again
// (Recover): an append-only file, one JSON record a line, written before
// the kernel is answered, so that every nodeid and file handle the
// kernel was told of is in it:
//   - {"init": ...}: the kernel's INIT (first line);
//   - {"n": NODEID, "fh": ..., "ino": ..., "gen": ..., "mode": ...}: a
//     nodeid (LOOKUP, CREATE, MKDIR, MKNOD, SYMLINK, LINK, READDIRPLUS)
//     and its NFS file handle, written once per nodeid;
//   - {"f": FH, "n": NODEID, "dir": true|false, "ro": true|false}: an
//     open file or directory handle (OPEN, CREATE, OPENDIR);
//   - {"r": FH}: its release.
//
// The page cache keeps what was written when the process dies; a
// restarted process rewrites the file with what it restored.

// mapRecord is one line of the state map.
type mapRecord struct {
	Init *fuse.InitIn `json:"init,omitempty"`
	Node uint64       `json:"n,omitempty"`
	FH   []byte       `json:"fh,omitempty"`
	Ino  uint64       `json:"ino,omitempty"`
	Gen  uint64       `json:"gen,omitempty"`
	Mode uint32       `json:"mode,omitempty"`
	File uint64       `json:"f,omitempty"`
	Dir  bool         `json:"dir,omitempty"`
	RO   bool         `json:"ro,omitempty"`
	Rel  uint64       `json:"r,omitempty"`
}

// stateMap appends the records of a running mount.
type stateMap struct {
	mu    sync.Mutex
	f     *os.File
	t     *goFuseTable
	nodes map[uint64]bool // nodeids written
	files map[uint64]bool // open handles written
	err   atomic.Bool     // a write failed (logged once)
}

// createStateMap (re)writes the map at path with init and the nodes and
// files of s (a restored state; nil for none) and returns it for appends.
func createStateMap(path string, t *goFuseTable, init *fuse.InitIn, s *handoverState) (*stateMap, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fusefs: state map: %w", err)
	}
	m := &stateMap{f: f, t: t, nodes: map[uint64]bool{fuse.FUSE_ROOT_ID: true}, files: map[uint64]bool{}}
	m.write(mapRecord{Init: init})
	if s != nil {
		for _, n := range s.Nodes {
			m.nodes[n.ID] = true
			m.write(mapRecord{Node: n.ID, FH: n.FH, Ino: n.Ino, Gen: n.Gen, Mode: n.Mode})
		}
		for _, hf := range s.Files {
			m.files[uint64(hf.FH)] = true
			m.write(mapRecord{File: uint64(hf.FH), Node: hf.Node, Dir: hf.Dir, RO: hf.ReadOnly})
		}
	}
	return m, nil
}

func (m *stateMap) write(r mapRecord) {
	b, _ := json.Marshal(r)
	b = append(b, '\n')
	if _, err := m.f.Write(b); err != nil && !m.err.Swap(true) {
		klog.ErrorS(err, "fusefs: state map not written: a restarted mount process will not know every node")
	}
}

// node records nodeid (if new), reading its node from go-fuse's table.
func (m *stateMap) node(id uint64) {
	if m == nil || id == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.nodes[id] {
		return
	}
	in := m.t.inode(id)
	if in == nil {
		return
	}
	n, ok := in.Operations().(*node)
	if !ok {
		return
	}
	m.nodes[id] = true
	sa := in.StableAttr()
	m.write(mapRecord{Node: id, FH: n.fh.Bytes(), Ino: sa.Ino, Gen: sa.Gen, Mode: sa.Mode})
}

// open records an open file or directory handle.
func (m *stateMap) open(fh, nodeID uint64, dir, readOnly bool) {
	if m == nil || fh == 0 {
		return
	}
	m.node(nodeID)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.files[fh] = true
	m.write(mapRecord{File: fh, Node: nodeID, Dir: dir, RO: readOnly})
}

// release records the release of a handle.
func (m *stateMap) release(fh uint64) {
	if m == nil || fh == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.files[fh] {
		delete(m.files, fh)
		m.write(mapRecord{Rel: fh})
	}
}

// direntplus records the nodes of a READDIRPLUS reply: fuse_direntplus
// entries (a fuse_entry_out, then a fuse_dirent and its name padded to 8
// bytes; include/uapi/linux/fuse.h).
func (m *stateMap) direntplus(b []byte) {
	if m == nil {
		return
	}
	walkDirentplus(b, m.node)
}

// walkDirentplus calls fn with the nodeid of each whole entry of the
// READDIRPLUS reply b; it stops at a truncated one.
func walkDirentplus(b []byte, fn func(uint64)) {
	const entryOut, dirent = 128, 24
	for len(b) >= entryOut+dirent {
		id := binary.LittleEndian.Uint64(b)
		namelen := uint64(binary.LittleEndian.Uint32(b[entryOut+16:]))
		sz := (entryOut + dirent + namelen + 7) &^ 7
		if sz > uint64(len(b)) {
			return
		}
		fn(id)
		b = b[sz:]
	}
}

// readStateMap reads the map at path into the state a restore takes: the
// nodes (one lookup each: the kernel's counts are not known, Forget is
// clamped), the handles open, the INIT.
func readStateMap(path string) (*handoverState, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fusefs: state map: %w", err)
	}
	defer f.Close()
	s := &handoverState{}
	nodes := map[uint64]handoverNode{}
	files := map[uint64]handoverFile{}
	var init bool
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r mapRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			break // a record cut by the crash: the last one
		}
		switch {
		case r.Init != nil:
			s.Init, init = *r.Init, true
		case r.Rel != 0:
			delete(files, r.Rel)
		case r.File != 0:
			files[r.File] = handoverFile{FH: uint32(r.File), Node: r.Node, Dir: r.Dir, ReadOnly: r.RO}
		case r.Node != 0:
			nodes[r.Node] = handoverNode{ID: r.Node, Lookups: 1, FH: r.FH, Ino: r.Ino, Gen: r.Gen, Mode: r.Mode}
		}
	}
	if !init {
		return nil, fmt.Errorf("fusefs: state map %s has no INIT", path)
	}
	for _, n := range nodes {
		s.Nodes = append(s.Nodes, n)
	}
	for _, hf := range files {
		if _, ok := nodes[hf.Node]; ok || hf.Node == fuse.FUSE_ROOT_ID {
			s.Files = append(s.Files, hf)
		}
	}
	return s, nil
}

// inode returns the node registered under nodeid id, nil if none.
func (t *goFuseTable) inode(id uint64) *fs.Inode {
	t.mu.Lock()
	defer t.mu.Unlock()
	nodesV, _ := field(t.ids, "nodes")
	e := nodesV.MapIndex(reflect.ValueOf(id))
	if !e.IsValid() || e.IsNil() {
		return nil
	}
	ip, err := field(e.Elem(), "inode")
	if err != nil {
		return nil
	}
	p, _ := ip.Addr().Interface().(*atomic.Pointer[fs.Inode])
	if p == nil {
		return nil
	}
	return p.Load()
}

// lookupCount returns go-fuse's lookup count of nodeid id (0: unknown).
func (t *goFuseTable) lookupCount(id uint64) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	nodesV, _ := field(t.ids, "nodes")
	e := nodesV.MapIndex(reflect.ValueOf(id))
	if !e.IsValid() || e.IsNil() {
		return 0
	}
	lc, err := field(e.Elem(), "lookupCount")
	if err != nil {
		return 0
	}
	return lc.Uint()
}
