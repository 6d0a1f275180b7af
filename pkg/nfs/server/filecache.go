package server

import (
	"encoding/binary"
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

// cachedFile is one open file of the cache: val is the descriptor, open
// for reading (O_RDONLY) or writing (O_WRONLY) the regular file (dev, ino).
type cachedFile = cacheEntry[fileKey, int]

// fileCache keeps the files READ, WRITE and SETATTR's truncate opened from
// their handles, as knfsd's file cache does: a READ or WRITE whose file is
// open does one fstat(2) (for the attributes and the permission check,
// done on every call as before) instead of open_by_handle_at(2) twice
// (O_PATH and the I/O reopen), fstat(2) and two close(2). Entries are
// keyed by the kernel file handle and the access mode; a cached descriptor
// refers to the very inode its handle named, so the export and permission
// checks a call makes before using it are those it made with a fresh open.
// A file found unlinked (st_nlink 0) is dropped and the call opens it
// again from the handle (NFS3ERR_STALE once it is gone); REMOVE and RENAME
// drop the file they unlink, so that the cache does not keep its space.
type fileCache struct {
	inodeCache[fileKey, int]
}

func newFileCache() *fileCache {
	fc := &fileCache{}
	fc.inodeCache = *newInodeCache[fileKey, int](fileCacheSize, fileCacheIdle, func(fd int) { unix.Close(fd) })
	return fc
}

// fileKey is the cache key of a kernel file handle opened with an access
// mode: handle type (4 octets), access mode (1), handle length (1) and the
// handle (at most MAX_HANDLE_SZ, 128 octets), zeros after it.
type fileKey [4 + 1 + 1 + 128]byte

// keyOf returns the key of kh opened with access mode acc (O_RDONLY or
// O_WRONLY).
func keyOf(kh unix.FileHandle, acc int) (k fileKey) {
	binary.BigEndian.PutUint32(k[:4], uint32(kh.Type()))
	k[4] = byte(acc)
	k[5] = byte(copy(k[6:], kh.Bytes()))
	return k
}

func (fc *fileCache) stats() FileCacheStats {
	return FileCacheStats{Open: fc.size(), Hits: fc.hits.Load(), Misses: fc.misses.Load(), Evictions: fc.evictions.Load()}
}

// get returns the cached file of kh opened with acc, with a reference the
// caller drops with release, or nil.
func (fc *fileCache) get(kh unix.FileHandle, acc int) *cachedFile {
	return fc.inodeCache.get(keyOf(kh, acc))
}

// add caches fd, which the caller opened from kh with acc for the regular
// file st, and returns it with a reference the caller drops with release.
// The cache owns fd from here on: it is closed when evicted (at once, or by
// the last release).
func (fc *fileCache) add(kh unix.FileHandle, acc, fd int, st *unix.Stat_t) *cachedFile {
	return fc.inodeCache.add(keyOf(kh, acc), st.Dev, st.Ino, fd)
}
