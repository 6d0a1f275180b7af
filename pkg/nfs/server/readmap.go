package server

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// ReadMapWindow is the size in bytes of one mapping of the READ path: files
// are mapped read-only and shared (the page cache's pages, coherent with
// pwrite(2)) in windows of this size aligned on it.
const ReadMapWindow = 4 << 20

// readMapIdle is how long a window nobody reads stays mapped; older ones
// are unmapped by the next READ that maps or looks up a window, so that a
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

// window is one mapping. refs counts READs whose replies are being sent
// from it; a window evicted with refs > 0 is unmapped by the last release.
type window struct {
	key        winKey
	mem        []byte
	refs       int
	gone       bool   // out of the table
	seq        uint64 // readMap.seq when mapped
	used       time.Time
	prev, next *window // LRU list, most recent first
	release    func()  // m.release(w), made once
}

// readMap is the table of mapped windows, bounded by limit bytes, least
// recently used evicted first. A window holds a reference to its file (the
// mapping does), so a (dev, ino) key cannot name another file while mapped.
type readMap struct {
	limit int64
	idle  time.Duration // readMapIdle

	mu         sync.Mutex
	wins       map[winKey]*window
	head, tail *window
	mapped     int64
	seq        uint64 // windows mapped so far (window.seq of the last)

	hits, misses, evictions, copied, faults atomic.Uint64
}

func newReadMap(limit int64) *readMap {
	if limit > 0 && limit < ReadMapWindow {
		limit = ReadMapWindow
	}
	return &readMap{limit: max(limit, 0), idle: readMapIdle, wins: map[winKey]*window{}}
}

func (m *readMap) stats() ReadMapStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return ReadMapStats{Limit: m.limit, Mapped: m.mapped, Windows: len(m.wins),
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
	now := time.Now()
	m.mu.Lock()
	m.expireLocked(now)
	if w := m.wins[k]; w != nil {
		w.refs++
		w.used = now
		m.frontLocked(w)
		m.mu.Unlock()
		m.hits.Add(1)
		return w
	}
	for m.mapped+ReadMapWindow > m.limit {
		v := m.tail
		for v != nil && v.refs > 0 {
			v = v.prev
		}
		if v == nil {
			m.mu.Unlock()
			return nil
		}
		m.dropLocked(v)
	}
	m.mapped += ReadMapWindow // reserved while mapping outside the lock
	m.mu.Unlock()
	mem, err := unix.Mmap(fd, k.idx*ReadMapWindow, ReadMapWindow, unix.PROT_READ, unix.MAP_SHARED)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.mapped -= ReadMapWindow
		return nil
	}
	m.misses.Add(1)
	m.seq++
	w := &window{key: k, mem: mem, refs: 1, used: now, seq: m.seq}
	w.release = func() { m.release(w) }
	if old := m.wins[k]; old != nil { // mapped meanwhile by another READ
		m.dropLocked(old)
	}
	m.wins[k] = w
	m.frontLocked(w)
	return w
}

// release drops a reference taken by get.
func (m *readMap) release(w *window) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w.refs--
	if w.gone && w.refs == 0 {
		unix.Munmap(w.mem)
		w.mem = nil
	}
}

// forget unmaps (now, or when their replies are sent) the windows of the
// file (dev, ino): REMOVE and RENAME call it when they unlink a file.
func (m *readMap) forget(dev, ino uint64) {
	if m.limit == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for w := m.head; w != nil; {
		next := w.next
		if w.key.dev == dev && w.key.ino == ino {
			m.dropLocked(w)
		}
		w = next
	}
}

// close unmaps every window not in use (the rest when released).
// mark returns the count of windows mapped so far and whether any is
// mapped now. A REMOVE that finds none mapped unlinks without learning
// the file's inode, then calls forgetSince(seq) for the windows mapped
// meanwhile.
func (m *readMap) mark() (seq uint64, mapped bool) {
	if m.limit == 0 {
		return 0, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seq, len(m.wins) > 0
}

// forgetSince unmaps (now, or when their replies are sent) the windows
// mapped after mark returned seq, whatever their file.
func (m *readMap) forgetSince(seq uint64) {
	if m.limit == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seq == seq {
		return
	}
	for w := m.head; w != nil; {
		next := w.next
		if w.seq > seq {
			m.dropLocked(w)
		}
		w = next
	}
}

func (m *readMap) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.head != nil {
		m.dropLocked(m.head)
	}
}

func (m *readMap) expireLocked(now time.Time) {
	for m.tail != nil && m.tail.refs == 0 && now.Sub(m.tail.used) > m.idle {
		m.dropLocked(m.tail)
	}
}

// dropLocked takes w out of the table and the list, unmapping it unless
// a reply is still being sent from it.
func (m *readMap) dropLocked(w *window) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		m.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		m.tail = w.prev
	}
	w.prev, w.next = nil, nil
	delete(m.wins, w.key)
	w.gone = true
	m.mapped -= ReadMapWindow
	m.evictions.Add(1)
	if w.refs == 0 {
		unix.Munmap(w.mem)
		w.mem = nil
	}
}

func (m *readMap) frontLocked(w *window) {
	if m.head == w {
		return
	}
	if w.prev != nil || w.next != nil || m.tail == w {
		if w.prev != nil {
			w.prev.next = w.next
		}
		if w.next != nil {
			w.next.prev = w.prev
		} else {
			m.tail = w.prev
		}
	}
	w.prev, w.next = nil, m.head
	if m.head != nil {
		m.head.prev = w
	}
	m.head = w
	if m.tail == nil {
		m.tail = w
	}
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
	data = w.mem[lo : lo+count : lo+count]
	if !populate(w.mem, lo, count) {
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
