// Package lograte bounds how often like events are logged: a caller that
// logs what a network peer causes (a refused call, a bad token) logs at
// most one line per peer and kind every interval, so that a peer calling
// in a loop cannot flood the log, and each line says how many were left
// out since the previous one.
package lograte

import (
	"sync"
	"time"
)

// Limiter allows one event per key every Interval. Its zero value is not
// usable: set Interval and MaxKeys. It is safe for concurrent use.
type Limiter struct {
	// Interval is the least time between two allowed events of one key.
	Interval time.Duration
	// MaxKeys bounds the keys remembered; when a new key finds the table
	// full, the keys last allowed Interval ago or more are forgotten, and
	// if none was, the new key's event is not allowed (nor counted).
	MaxKeys int
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu sync.Mutex
	m  map[any]*entry
}

// entry is when a key's event was last allowed and how many were not
// since.
type entry struct {
	allowed time.Time
	skipped int
}

// Allow reports whether an event of key (a comparable value: an address,
// a struct of an address and a reason) may be logged now, and how many
// events of key were not allowed since the last one that was (0 for a new
// key).
func (l *Limiter) Allow(key any) (ok bool, skipped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.Now != nil {
		now = l.Now()
	}
	if l.m == nil {
		l.m = map[any]*entry{}
	}
	e := l.m[key]
	if e != nil && now.Sub(e.allowed) < l.Interval {
		e.skipped++
		return false, 0
	}
	if e == nil {
		if len(l.m) >= l.MaxKeys {
			for k, o := range l.m {
				if now.Sub(o.allowed) >= l.Interval {
					delete(l.m, k)
				}
			}
			if len(l.m) >= l.MaxKeys {
				return false, 0
			}
		}
		e = &entry{}
		l.m[key] = e
	}
	skipped = e.skipped
	e.allowed, e.skipped = now, 0
	return true, skipped
}

// Len returns the number of keys remembered.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
