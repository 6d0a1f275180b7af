//go:build ibverbs

package ibverbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The registration cache (memory-window mode only). With type 2 memory
// windows a region's STag is the window, bound per registration, so the
// underlying ibv_mr can outlive the region: RegMR of memory inside a cached
// registration only allocates and binds a window (no ibv_reg_mr(3) system
// call, no page pinning), and MR.Close deallocates the window and keeps the
// registration for the next caller. A miss registers the caller's slice
// extended to its capacity (the rest of the same Go array, when that stays
// within a quarter of the cache), so that the next chunk of a large buffer
// hits. The cache holds a reference to each registered array (and pins
// it), so cached memory is never freed or reused by the Go runtime while
// registered: an address match is always the same live array. Unused
// registrations are deregistered least recently used first when the cache
// exceeds Config.RegCacheBytes (default 64 MiB), and all at PD.Close.
// Without memory windows (siw, iWARP) the STag is the ibv_mr's own rkey,
// which a Send With Invalidate consumes, so there is nothing to cache.

// DefaultRegCacheBytes is the registration cache's default capacity.
const DefaultRegCacheBytes = 64 << 20

// RegCacheStats counts the registration cache's work.
type RegCacheStats struct {
	Hits, Misses, Evictions uint64
	Bytes                   int64 // registered and cached now
}

type regEntry struct {
	start, end uintptr
	access     C.int
	buf        []byte // keeps the array alive
	pin        runtime.Pinner
	mr         *C.struct_ibv_mr
	refs       int
	used       uint64
}

type regCache struct {
	dev   *Device
	pd    *pd
	limit int64

	mu      sync.Mutex
	entries []*regEntry
	bytes   int64
	clock   uint64
}

func (c *regCache) get(buf []byte, access C.int) (*regEntry, error) {
	start := uintptr(unsafe.Pointer(&buf[0]))
	end := start + uintptr(len(buf))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock++
	for _, e := range c.entries {
		if e.start <= start && end <= e.end && e.access&access == access {
			e.refs++
			e.used = c.clock
			c.dev.cacheHits.Add(1)
			return e, nil
		}
	}
	c.dev.cacheMisses.Add(1)
	reg := buf
	if extra := cap(buf) - len(buf); extra > 0 && int64(cap(buf)) <= c.limit/4 {
		reg = buf[:cap(buf)]
	}
	e, err := c.register(reg, access)
	if err != nil && len(reg) != len(buf) {
		e, err = c.register(buf, access)
	}
	if err != nil {
		return nil, err
	}
	e.refs, e.used = 1, c.clock
	c.entries = append(c.entries, e)
	c.bytes += int64(len(e.buf))
	c.dev.cacheBytes.Add(int64(len(e.buf)))
	c.evictLocked()
	return e, nil
}

func (c *regCache) register(buf []byte, access C.int) (*regEntry, error) {
	e := &regEntry{buf: buf, access: access, start: uintptr(unsafe.Pointer(&buf[0]))}
	e.end = e.start + uintptr(len(buf))
	e.pin.Pin(&buf[0])
	r, err := C.gv_reg_mr(c.pd.pd, unsafe.Pointer(&buf[0]), C.size_t(len(buf)), access)
	if r == nil {
		e.pin.Unpin()
		return nil, fmt.Errorf("ibverbs: ibv_reg_mr(%d bytes): %w", len(buf), errnoOr(err))
	}
	e.mr = r
	return e, nil
}

func (c *regCache) put(e *regEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	c.evictLocked()
}

// evictLocked deregisters unused entries, least recently used first,
// while the cache is over its limit.
func (c *regCache) evictLocked() {
	for c.bytes > c.limit {
		var victim *regEntry
		vi := -1
		for i, e := range c.entries {
			if e.refs == 0 && (victim == nil || e.used < victim.used) {
				victim, vi = e, i
			}
		}
		if victim == nil {
			return
		}
		c.entries = append(c.entries[:vi], c.entries[vi+1:]...)
		c.free(victim)
		c.dev.cacheEvictions.Add(1)
	}
}

func (c *regCache) free(e *regEntry) {
	C.ibv_dereg_mr(e.mr)
	e.pin.Unpin()
	c.bytes -= int64(len(e.buf))
	c.dev.cacheBytes.Add(-int64(len(e.buf)))
	e.buf = nil
}

// drain deregisters every unused entry (PD.Close).
func (c *regCache) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.entries[:0]
	for _, e := range c.entries {
		if e.refs == 0 {
			c.free(e)
		} else {
			kept = append(kept, e)
		}
	}
	c.entries = kept
}

type cacheCounters struct {
	cacheHits, cacheMisses, cacheEvictions atomic.Uint64
	cacheBytes                             atomic.Int64
}

// RegCacheStats returns the registration cache counters of all PDs of d.
func (d *Device) RegCacheStats() RegCacheStats {
	return RegCacheStats{Hits: d.cacheHits.Load(), Misses: d.cacheMisses.Load(),
		Evictions: d.cacheEvictions.Load(), Bytes: d.cacheBytes.Load()}
}
