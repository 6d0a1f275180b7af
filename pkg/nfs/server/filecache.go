package server

import (
	"container/list"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// fileCacheSize is the most open files fileCache keeps.
const fileCacheSize = 512

// fileCacheIdle is how long a file nobody reads or writes stays open: the
// cache's timer closes older ones, so that a file removed outside the
// server does not keep its space longer (knfsd's file cache closes unused
// files after about two seconds as well).
const fileCacheIdle = 2 * time.Second

// FileCacheStats are the counters of the open-file cache of READ, WRITE,
// COMMIT and SETATTR's size change (Server.FileCacheStats).
type FileCacheStats struct {
	Open      int    // files open in the cache now
	Hits      uint64 // READs, WRITEs, COMMITs and truncating SETATTRs that found their file open
	Misses    uint64 // READs, WRITEs and truncating SETATTRs that opened it (open_by_handle_at)
	Evictions uint64 // files closed for the bound, idleness, REMOVE or RENAME, or found unlinked
}

// cachedFile is one open file of the cache: fd open for reading (O_RDONLY)
// or writing (O_WRONLY) the regular file (dev, ino). refs counts the calls
// using fd; a file evicted with refs > 0 is closed by the last release.
type cachedFile struct {
	key      string
	fd       int
	dev, ino uint64
	refs     int
	gone     bool
	seq      uint64 // fileCache.seq when opened
	used     time.Time
	elem     *list.Element // in fileCache.lru
}

// fileCache keeps the files READ, WRITE and SETATTR's truncate opened from
// their handles, as knfsd's file cache does: a READ or WRITE whose file is
// open does one fstat(2) (for the attributes and the permission check,
// done on every call as before) instead of open_by_handle_at(2) twice
// (O_PATH and the I/O reopen), fstat(2) and two close(2). Entries are keyed by the kernel file
// handle and the access mode; a cached descriptor refers to the very inode
// its handle named, so the export and permission checks a call makes
// before using it are those it made with a fresh open. A file found
// unlinked (st_nlink 0) is dropped and the call opens it again from the
// handle (NFS3ERR_STALE once it is gone); REMOVE and RENAME drop the file
// they unlink, so that the cache does not keep its space.
type fileCache struct {
	max  int
	idle time.Duration

	mu     sync.Mutex
	files  map[string]*cachedFile
	lru    list.List // of *cachedFile, most recently used first
	seq    uint64    // files opened so far
	timer  *time.Timer
	closed bool

	hits, misses, evictions atomic.Uint64
}

func newFileCache() *fileCache {
	return &fileCache{max: fileCacheSize, idle: fileCacheIdle, files: map[string]*cachedFile{}}
}

// fileKeyLen is the longest key: handle type (4 octets), access mode (1)
// and the handle (at most MAX_HANDLE_SZ, 128 octets).
const fileKeyLen = 4 + 1 + 128

// fileKey writes the cache key of kh opened with access mode acc
// (O_RDONLY or O_WRONLY) into buf and returns it.
func fileKey(buf *[fileKeyLen]byte, kh unix.FileHandle, acc int) []byte {
	binary.BigEndian.PutUint32(buf[:4], uint32(kh.Type()))
	buf[4] = byte(acc)
	return buf[:5+copy(buf[5:], kh.Bytes())]
}

func (fc *fileCache) stats() FileCacheStats {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return FileCacheStats{Open: len(fc.files), Hits: fc.hits.Load(), Misses: fc.misses.Load(), Evictions: fc.evictions.Load()}
}

// get returns the cached file of kh opened with acc, with a reference the
// caller drops with release, or nil.
func (fc *fileCache) get(kh unix.FileHandle, acc int) *cachedFile {
	var buf [fileKeyLen]byte
	k := fileKey(&buf, kh, acc)
	fc.mu.Lock()
	f := fc.files[string(k)]
	if f != nil {
		f.refs++
		f.used = time.Now()
		fc.lru.MoveToFront(f.elem)
	}
	fc.mu.Unlock()
	if f != nil {
		fc.hits.Add(1)
	}
	return f
}

// add caches fd, which the caller opened from kh with acc for the regular
// file st, and returns it with a reference the caller drops with release.
// The cache owns fd from here on: it is closed when evicted (at once, or by
// the last release).
func (fc *fileCache) add(kh unix.FileHandle, acc, fd int, st *unix.Stat_t) *cachedFile {
	var buf [fileKeyLen]byte
	f := &cachedFile{key: string(fileKey(&buf, kh, acc)), fd: fd, dev: st.Dev, ino: st.Ino, refs: 1, used: time.Now()}
	fc.misses.Add(1)
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.closed {
		f.gone = true // closed by its release
		return f
	}
	if old := fc.files[f.key]; old != nil { // opened meanwhile by another call
		fc.dropLocked(old)
	}
	for len(fc.files) >= fc.max {
		e := fc.lru.Back()
		for e != nil && e.Value.(*cachedFile).refs > 0 {
			e = e.Prev()
		}
		if e == nil {
			f.gone = true // every file in use: this one is not kept
			return f
		}
		fc.dropLocked(e.Value.(*cachedFile))
	}
	fc.seq++
	f.seq = fc.seq
	fc.files[f.key] = f
	f.elem = fc.lru.PushFront(f)
	if fc.timer == nil {
		fc.timer = time.AfterFunc(fc.idle, fc.expire)
	}
	return f
}

// release drops a reference taken by get or add.
func (fc *fileCache) release(f *cachedFile) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	f.refs--
	if f.gone && f.refs == 0 {
		unix.Close(f.fd)
	}
}

// drop evicts f (a file found unlinked).
func (fc *fileCache) drop(f *cachedFile) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if !f.gone {
		fc.dropLocked(f)
	}
}

// forget closes (now, or when their calls end) the cached files of the
// file (dev, ino): REMOVE and RENAME call it when they unlink a file.
func (fc *fileCache) forget(dev, ino uint64) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for e := fc.lru.Front(); e != nil; {
		next := e.Next()
		if f := e.Value.(*cachedFile); f.dev == dev && f.ino == ino {
			fc.dropLocked(f)
		}
		e = next
	}
}

// mark returns the count of files opened so far and whether any is open
// now. A REMOVE that finds none open unlinks without learning the file's
// inode, then calls forgetSince(seq) for the files opened meanwhile.
func (fc *fileCache) mark() (seq uint64, open bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.seq, len(fc.files) > 0
}

// forgetSince closes (now, or when their calls end) the files opened after
// mark returned seq, whatever they are.
func (fc *fileCache) forgetSince(seq uint64) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.seq == seq {
		return
	}
	for e := fc.lru.Front(); e != nil; {
		next := e.Next()
		if f := e.Value.(*cachedFile); f.seq > seq {
			fc.dropLocked(f)
		}
		e = next
	}
}

// expire is the idle timer: it closes the files unused for fc.idle and
// runs again while any is open.
func (fc *fileCache) expire() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	now := time.Now()
	for e := fc.lru.Back(); e != nil && now.Sub(e.Value.(*cachedFile).used) >= fc.idle; e = fc.lru.Back() {
		// in use or not: a file in use is closed by its last release
		fc.dropLocked(e.Value.(*cachedFile))
	}
	fc.timer = nil
	if e := fc.lru.Back(); e != nil && !fc.closed {
		fc.timer = time.AfterFunc(fc.idle-now.Sub(e.Value.(*cachedFile).used), fc.expire)
	}
}

// close closes every file (those in use when their calls end); later adds
// are not kept.
func (fc *fileCache) close() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.closed = true
	if fc.timer != nil {
		fc.timer.Stop()
		fc.timer = nil
	}
	for e := fc.lru.Front(); e != nil; e = fc.lru.Front() {
		fc.dropLocked(e.Value.(*cachedFile))
	}
}

// dropLocked takes f out of the table and the list, closing it unless a
// call still uses it.
func (fc *fileCache) dropLocked(f *cachedFile) {
	fc.lru.Remove(f.elem)
	delete(fc.files, f.key)
	f.gone = true
	fc.evictions.Add(1)
	if f.refs == 0 {
		unix.Close(f.fd)
	}
}
