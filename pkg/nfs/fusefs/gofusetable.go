package fusefs

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// go-fuse's node API (package fs) keeps the kernel's numbers, nodeids with
// their lookup counts and file handles, in its bridge (rawBridge.ids, a
// mapIdentityTable, go-fuse v2.12) and exports neither a way to read them
// nor one to register a node under a given nodeid. A successor must
// answer the kernel under the nodeids and file handles it already knows.
// goFuseTable reads the table through reflection (the fields by name, so
// that a go-fuse that renames them fails the handover with
// errGoFuseTable instead of misreading memory); registering goes through
// the bridge's own LOOKUP and OPEN (handover.go), with the counter of
// nodeids read here to place each node.
//
// The minimal change to go-fuse that would make this reading needless:
// an exported Inode.NodeID() and lookup count, and a
// RawFileSystem-level "register ops under nodeid N with lookup count C
// and file handle F" for restoring.

// errGoFuseTable says that go-fuse's identity table does not have the
// fields this package reads (a go-fuse other than v2.12).
var errGoFuseTable = errors.New("fusefs: go-fuse's node table is not the one of go-fuse v2.12: handover unavailable")

// tableNode is one nodeid the kernel knows.
type tableNode struct {
	nodeID  uint64
	lookups uint64
	inode   *fs.Inode
}

// tableFile is one open file handle.
type tableFile struct {
	fh     uint32
	nodeID uint64
	file   fs.FileHandle
}

// goFuseTable reads a bridge's identity table.
type goFuseTable struct {
	ids reflect.Value // rawBridge.ids (mapIdentityTable), addressable
	mu  *sync.Mutex
}

// field returns the (unexported) field name of the addressable struct v,
// made readable and writable.
func field(v reflect.Value, name string) (reflect.Value, error) {
	if v.Kind() != reflect.Struct {
		return reflect.Value{}, fmt.Errorf("%w: %s is not in a struct", errGoFuseTable, name)
	}
	f := v.FieldByName(name)
	if !f.IsValid() || !f.CanAddr() {
		return reflect.Value{}, fmt.Errorf("%w: no field %s in %s", errGoFuseTable, name, v.Type())
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem(), nil
}

// newGoFuseTable returns the table of raw, what fs.NewNodeFS returned.
func newGoFuseTable(raw fuse.RawFileSystem) (*goFuseTable, error) {
	v := reflect.ValueOf(raw)
	if v.Kind() != reflect.Pointer || v.Elem().Type().Name() != "rawBridge" {
		return nil, fmt.Errorf("%w: %T is not go-fuse's bridge", errGoFuseTable, raw)
	}
	ids, err := field(v.Elem(), "ids")
	if err != nil {
		return nil, err
	}
	mu, err := field(ids, "mu")
	if err != nil {
		return nil, err
	}
	m, ok := mu.Addr().Interface().(*sync.Mutex)
	if !ok {
		return nil, fmt.Errorf("%w: ids.mu is a %s", errGoFuseTable, mu.Type())
	}
	t := &goFuseTable{ids: ids, mu: m}
	// check every field read, once
	for _, name := range []string{"nodes", "nextNodeId", "files"} {
		if _, err := field(ids, name); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// nodeIDOf returns the nodeid of in (0: not registered).
func nodeIDOf(in *fs.Inode) (uint64, error) {
	f, err := field(reflect.ValueOf(in).Elem(), "nodeId")
	if err != nil {
		return 0, err
	}
	return f.Uint(), nil
}

// nextNodeID returns the nodeid the next new inode gets.
func (t *goFuseTable) nextNodeID() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, _ := field(t.ids, "nextNodeId")
	return f.Uint()
}

// snapshot returns the nodes (by nodeid) and open files (by handle).
func (t *goFuseTable) snapshot() ([]tableNode, []tableFile, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	nodesV, _ := field(t.ids, "nodes")
	var nodes []tableNode
	it := nodesV.MapRange()
	for it.Next() {
		e := it.Value().Elem() // nodeEntry
		ip, err := field(e, "inode")
		if err != nil {
			return nil, nil, err
		}
		p, ok := ip.Addr().Interface().(*atomic.Pointer[fs.Inode])
		if !ok {
			return nil, nil, fmt.Errorf("%w: nodeEntry.inode is a %s", errGoFuseTable, ip.Type())
		}
		lc, err := field(e, "lookupCount")
		if err != nil {
			return nil, nil, err
		}
		nodes = append(nodes, tableNode{nodeID: it.Key().Uint(), lookups: lc.Uint(), inode: p.Load()})
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].nodeID < nodes[j].nodeID })
	filesV, _ := field(t.ids, "files")
	var files []tableFile
	for i := 1; i < filesV.Len(); i++ {
		fe := filesV.Index(i)
		if fe.IsNil() {
			continue
		}
		fv := fe.Elem()
		ff, err := field(fv, "file")
		if err != nil {
			return nil, nil, err
		}
		fi, err := field(fv, "inode")
		if err != nil {
			return nil, nil, err
		}
		in, _ := fi.Interface().(*fs.Inode)
		if in == nil || ff.IsNil() {
			continue
		}
		id, err := nodeIDOf(in)
		if err != nil {
			return nil, nil, err
		}
		fh, _ := ff.Interface().(fs.FileHandle)
		files = append(files, tableFile{fh: uint32(i), nodeID: id, file: fh})
	}
	return nodes, files, nil
}

// goFuseFD returns a duplicate (close-on-exec) of the /dev/fuse
// descriptor go-fuse's server s reads, read through reflection as the
// table is (fuseFD.conn, a syscall.RawConn).
func goFuseFD(s *fuse.Server) (int, error) {
	v := reflect.ValueOf(s).Elem()
	ff, err := field(v, "fuseFD")
	if err != nil || ff.IsNil() {
		return -1, fmt.Errorf("%w: no fuseFD", errGoFuseTable)
	}
	cf, err := field(ff.Elem(), "conn")
	if err != nil {
		return -1, err
	}
	rc, ok := cf.Interface().(syscall.RawConn)
	if !ok {
		return -1, fmt.Errorf("%w: fuseFD.conn is a %s", errGoFuseTable, cf.Type())
	}
	fd := -1
	var derr error
	if err := rc.Control(func(f uintptr) {
		fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 3)
	}); err != nil {
		return -1, err
	}
	return fd, derr
}
