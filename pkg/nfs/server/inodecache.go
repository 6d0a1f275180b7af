package server

import (
	"sync"
	"sync/atomic"
	"time"
)

// inodeCache is a table of resources the server keeps for files between
// calls (the open-file cache's descriptors, READ's mappings): entries keyed
// by K, each holding a V of one file (dev, ino), bounded to max entries
// with the least recently used evicted first, closed after idle unused,
// and dropped by file when a REMOVE or RENAME unlinks it (forget, or
// mark and forgetSince when the REMOVE did not learn the inode). An entry
// is reference-counted: one evicted while calls use it is freed by the
// last release, never under them.
type inodeCache[K comparable, V any] struct {
	max  int           // entries kept at the most
	idle time.Duration // an entry unused this long is dropped
	free func(V)       // closes or unmaps an entry's V

	mu         sync.Mutex
	ents       map[K]*cacheEntry[K, V]
	head, tail *cacheEntry[K, V] // most recently used first
	seq        uint64            // entries added so far (cacheEntry.seq of the last)
	timer      *time.Timer       // the idle expiry, while entries are kept
	closed     bool

	hits, misses, evictions atomic.Uint64
}

// cacheEntry is one entry of an inodeCache. refs counts the calls using
// val; gone is set once it left the table, and val is freed when both
// hold.
type cacheEntry[K comparable, V any] struct {
	key        K
	val        V
	dev, ino   uint64
	refs       int
	gone       bool
	seq        uint64 // inodeCache.seq when added
	used       time.Time
	prev, next *cacheEntry[K, V]
	release    func() // releases this entry (for a reply's AfterSend), made once
}

func newInodeCache[K comparable, V any](max int, idle time.Duration, free func(V)) *inodeCache[K, V] {
	return &inodeCache[K, V]{max: max, idle: idle, free: free, ents: map[K]*cacheEntry[K, V]{}}
}

// size returns the number of entries kept.
func (c *inodeCache[K, V]) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ents)
}

// get returns the entry of k with a reference the caller drops with
// release, or nil.
func (c *inodeCache[K, V]) get(k K) *cacheEntry[K, V] {
	c.mu.Lock()
	e := c.ents[k]
	if e != nil {
		e.refs++
		e.used = time.Now()
		c.frontLocked(e)
	}
	c.mu.Unlock()
	if e != nil {
		c.hits.Add(1)
	}
	return e
}

// room reports whether an entry added now would be kept: the table is
// below its bound or holds an entry no call uses. A caller whose V costs
// more than a lookup (a mapping) asks before it makes one.
func (c *inodeCache[K, V]) room() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	if len(c.ents) < c.max {
		return true
	}
	for e := c.tail; e != nil; e = e.prev {
		if e.refs == 0 {
			return true
		}
	}
	return false
}

// add keeps v, the resource of file (dev, ino) the caller made for k, and
// returns its entry with a reference the caller drops with release. The
// cache owns v from here on: it is freed when the entry is evicted (at
// once, or by the last release). When the cache is closed or every entry
// is in use, v is not kept: the entry is returned gone, freed by its
// release.
func (c *inodeCache[K, V]) add(k K, dev, ino uint64, v V) *cacheEntry[K, V] {
	e := &cacheEntry[K, V]{key: k, val: v, dev: dev, ino: ino, refs: 1, used: time.Now()}
	e.release = func() { c.release(e) }
	c.misses.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		e.gone = true
		return e
	}
	if old := c.ents[k]; old != nil { // made meanwhile by another call
		c.dropLocked(old)
	}
	for len(c.ents) >= c.max {
		v := c.tail
		for v != nil && v.refs > 0 {
			v = v.prev
		}
		if v == nil {
			e.gone = true
			return e
		}
		c.dropLocked(v)
	}
	c.seq++
	e.seq = c.seq
	c.ents[k] = e
	c.frontLocked(e)
	if c.timer == nil {
		c.timer = time.AfterFunc(c.idle, c.expire)
	}
	return e
}

// release drops a reference taken by get or add.
func (c *inodeCache[K, V]) release(e *cacheEntry[K, V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.gone && e.refs == 0 {
		c.freeLocked(e)
	}
}

// drop evicts e (its file found unlinked).
func (c *inodeCache[K, V]) drop(e *cacheEntry[K, V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !e.gone {
		c.dropLocked(e)
	}
}

// forget drops (freed now, or when their calls end) the entries of the
// file (dev, ino): REMOVE and RENAME call it when they unlink a file.
func (c *inodeCache[K, V]) forget(dev, ino uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.head; e != nil; {
		next := e.next
		if e.dev == dev && e.ino == ino {
			c.dropLocked(e)
		}
		e = next
	}
}

// mark returns the count of entries added so far and whether any is kept
// now. A REMOVE that finds none kept unlinks without learning the file's
// inode, then calls forgetSince(seq) for the entries added meanwhile.
func (c *inodeCache[K, V]) mark() (seq uint64, kept bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq, len(c.ents) > 0
}

// forgetSince drops (freed now, or when their calls end) the entries
// added after mark returned seq, whatever their file.
func (c *inodeCache[K, V]) forgetSince(seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seq == seq {
		return
	}
	for e := c.head; e != nil; {
		next := e.next
		if e.seq > seq {
			c.dropLocked(e)
		}
		e = next
	}
}

// expire is the idle timer: it drops the entries unused for c.idle (one
// in use is freed by its last release) and runs again while any is kept.
func (c *inodeCache[K, V]) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for c.tail != nil && now.Sub(c.tail.used) >= c.idle {
		c.dropLocked(c.tail)
	}
	c.timer = nil
	if c.tail != nil && !c.closed {
		c.timer = time.AfterFunc(c.idle-now.Sub(c.tail.used), c.expire)
	}
}

// close drops every entry (those in use freed when their calls end);
// later adds are not kept.
func (c *inodeCache[K, V]) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	for c.head != nil {
		c.dropLocked(c.head)
	}
}

// dropLocked takes e out of the table and the list, freeing its V unless
// a call still uses it.
func (c *inodeCache[K, V]) dropLocked(e *cacheEntry[K, V]) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = nil, nil
	delete(c.ents, e.key)
	e.gone = true
	c.evictions.Add(1)
	if e.refs == 0 {
		c.freeLocked(e)
	}
}

// freeLocked frees e's V, once.
func (c *inodeCache[K, V]) freeLocked(e *cacheEntry[K, V]) {
	c.free(e.val)
	var zero V
	e.val = zero
}

// frontLocked moves e, in the list or new, to its front.
func (c *inodeCache[K, V]) frontLocked(e *cacheEntry[K, V]) {
	if c.head == e {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
		if e.next != nil {
			e.next.prev = e.prev
		} else {
			c.tail = e.prev
		}
	}
	e.prev, e.next = nil, c.head
	if c.head != nil {
		c.head.prev = e
	}
	c.head = e
	if c.tail == nil {
		c.tail = e
	}
}
