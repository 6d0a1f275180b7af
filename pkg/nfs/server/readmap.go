package server

import (
	"runtime/debug"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// ReadMapWindow is the size in bytes of one mapping of the READ path: files
// are mapped read-only and shared (the page cache's pages, coherent with
// pwrite(2)) in windows of this size aligned on it.
const ReadMapWindow = 4 << 20

// readMapIdle is how long a window nobody reads stays mapped, so that a
// mapping of a file removed outside the server does not pin its space.
const readMapIdle = 30 * time.Second

// ReadMapStats are the counters of the READ mappings (Server.ReadMapStats).
type ReadMapStats struct {
	Limit     int64  // the bound on MappedBytes; 0: READ copies with pread(2)
	Mapped    int64  // bytes mapped now (windows × ReadMapWindow)
	Windows   int    // windows mapped now
	Hits      uint64 // READs answered from a window already mapped
	Misses    uint64 // READs that mapped a window
	Evictions uint64 // windows unmapped for the bound, idleness or REMOVE
	Copied    uint64 // READs answered with pread(2) instead (range across a window edge, bound too small, mmap failed)
	Faults    uint64 // READs whose pages faulted (file shrunk under the mapping)
}

type winKey struct {
	dev, ino uint64
	idx      int64 // offset / ReadMapWindow
}

// window is one mapping (val, ReadMapWindow bytes). Its refs count READs
// whose replies are being sent from it; a window evicted meanwhile is
// unmapped by the last release.
type window = cacheEntry[winKey, []byte]

// readMap is the table of mapped windows, bounded by limit bytes, least
// recently used evicted first. A window holds a reference to its file (the
// mapping does), so a (dev, ino) key cannot name another file while mapped.
type readMap struct {
	inodeCache[winKey, []byte]
	limit int64

	copied, faults atomic.Uint64
}

func newReadMap(limit int64) *readMap {
	if limit > 0 && limit < ReadMapWindow {
		limit = ReadMapWindow
	}
	limit = max(limit, 0)
	m := &readMap{limit: limit}
	m.inodeCache = *newInodeCache[winKey, []byte](int(limit/ReadMapWindow), readMapIdle, func(mem []byte) { unix.Munmap(mem) })
	return m
}

func (m *readMap) stats() ReadMapStats {
	n := m.size()
	return ReadMapStats{Limit: m.limit, Mapped: int64(n) * ReadMapWindow, Windows: n,
		Hits: m.hits.Load(), Misses: m.misses.Load(), Evictions: m.evictions.Load(),
		Copied: m.copied.Load(), Faults: m.faults.Load()}
}

// get returns the window of fd's file (st its fstat) holding off, mapping
// it when not mapped, with a reference the caller drops with release; or
// nil when the path is off, the window cannot be mapped within the bound
// (every window in use) or mmap failed.
func (m *readMap) get(fd int, st *unix.Stat_t, off int64) *window {
	if m.limit == 0 {
		return nil
	}
	k := winKey{dev: st.Dev, ino: st.Ino, idx: off / ReadMapWindow}
	if w := m.inodeCache.get(k); w != nil {
		return w
	}
	if !m.room() {
		return nil
	}
	mem, err := unix.Mmap(fd, k.idx*ReadMapWindow, ReadMapWindow, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil
	}
	return m.add(k, st.Dev, st.Ino, mem)
}

// readMapped returns count bytes (fewer at end of file) of fd's file at
// off as a slice of a mapped window, with the reply's AfterSend hook set to
// release it; st is refreshed with fstat(2) and gives the size the data is
// cut to. ok is false when the READ must copy instead: the path is off,
// the range crosses a window edge, no window could be mapped, or the file
// shrank while its pages were checked (a fault, caught: the copy then reads
// what is left).
func (m *readMap) readMapped(fd int, st *unix.Stat_t, off int64, count int, b interface{ AfterSend(func()) }) (data []byte, ok bool) {
	if m.limit == 0 {
		return nil, false
	}
	if off/ReadMapWindow != (off+int64(count)-1)/ReadMapWindow {
		m.copied.Add(1)
		return nil, false
	}
	if err := unix.Fstat(fd, st); err != nil || st.Size <= off {
		return nil, err == nil // nothing to send at or past the end
	}
	count = int(min(int64(count), st.Size-off))
	w := m.get(fd, st, off)
	if w == nil {
		m.copied.Add(1)
		return nil, false
	}
	lo := int(off % ReadMapWindow)
	data = w.val[lo : lo+count : lo+count]
	if !populate(w.val, lo, count) {
		m.faults.Add(1)
		m.release(w)
		return nil, false
	}
	b.AfterSend(w.release)
	return data, true
}

// populate makes the pages of mem[lo:lo+n] present before the reply is
// sent, with one madvise(MADV_POPULATE_READ) (Linux 5.14) over the pages
// the range covers, in place of a page fault per page, and reports false
// when they cannot be (EFAULT: a page past the end of the file, which had
// shrunk below the range). On older kernels (EINVAL) it touches them.
// mem is a window's mapping, page-aligned.
func populate(mem []byte, lo, n int) bool {
	if n == 0 {
		return true
	}
	start := lo &^ (pageSize - 1)
	end := min((lo+n+pageSize-1)&^(pageSize-1), len(mem))
	switch err := unix.Madvise(mem[start:end], unix.MADV_POPULATE_READ); err {
	case nil:
		return true
	case unix.EINVAL, unix.ENOSYS:
		return touch(mem[lo : lo+n])
	default:
		return false
	}
}

// touch reads one byte of every page of p, so that the pages are in
// before the reply is sent, and reports false if one faulted (SIGBUS: the
// file was truncated below it) instead of crashing.
func touch(p []byte) (ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			ok = false
		}
	}()
	var s byte
	for i := 0; i < len(p); i += pageSize {
		s += p[i]
	}
	if len(p) > 0 {
		s += p[len(p)-1]
	}
	touchSink.Store(uint32(s))
	return true
}

const pageSize = 4096

var touchSink atomic.Uint32 // keeps touch's loads
