package client

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
)

// LockOwnerState is one lock owner's wire identity (nlm4_lock svid and
// oh, RFC 1813 appendix, NLM v4): the server knows a lock by it.
type LockOwnerState struct {
	Owner uint64 // the consumer's owner (FUSE lock_owner)
	Svid  int32
	OH    []byte
}

// LockState is what a Locker knows of its locks, for another process
// that takes the mount over (Locker.State, Locker.Adopt): each owner's
// svid and oh, and the ranges each holds, so that the server sees the
// same owners holding the same locks and later unlocks and reclaims
// name them alike.
type LockState struct {
	Owners []LockOwnerState
	Held   []HeldLock
}

// State returns the owners that hold locks and their locks. Owners with
// only calls in progress (a blocked LOCK) are included too: the waiter
// that asks again after a takeover must use the same svid and oh.
func (l *Locker) State() LockState {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s LockState
	for _, o := range l.owners {
		s.Owners = append(s.Owners, LockOwnerState{Owner: o.id, Svid: o.svid, OH: append([]byte(nil), o.oh...)})
	}
	for _, h := range l.held {
		for _, r := range h.set.Ranges() {
			s.Held = append(s.Held, HeldLock{FH: h.fh, Owner: h.owner.id, Svid: h.owner.svid, Start: r.Start, End: r.End, Exclusive: r.Exclusive})
		}
	}
	return s
}

// ErrLockStateConflict says that Adopt found an owner or svid already in
// use by this Locker.
var ErrLockStateConflict = errors.New("client: lock state conflicts with the locks of this mount")

// Adopt takes the owners and held locks of s as this Locker's own,
// without a call to the server: they are the locks the server granted to
// the process that served the mount before this one. Owners keep their
// svid and oh; each held file keeps its owner referenced. Adopt must be
// called before any lock of this Locker. Errors: ErrLockStateConflict.
func (l *Locker) Adopt(s LockState) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, os := range s.Owners {
		if l.owners[os.Owner] != nil || l.bySvid[os.Svid] != nil {
			return fmt.Errorf("%w: owner %d svid %d", ErrLockStateConflict, os.Owner, os.Svid)
		}
		o := &lockOwner{id: os.Owner, svid: os.Svid, oh: append([]byte(nil), os.OH...)}
		l.owners[o.id] = o
		l.bySvid[o.svid] = o
	}
	for _, h := range s.Held {
		o := l.owners[h.Owner]
		if o == nil {
			return fmt.Errorf("%w: held lock of unknown owner %d", ErrLockStateConflict, h.Owner)
		}
		k := heldKey{h.FH, h.Owner}
		hf := l.held[k]
		if hf == nil {
			hf = &heldFile{fh: h.FH, owner: o}
			o.refs++
			l.held[k] = hf
			if l.opts.State != nil {
				l.opts.State.monitor(l.srv.Server)
			}
		}
		hf.set.Add(h.Start, min(h.End, MaxLockOffset), h.Exclusive)
	}
	// an owner that holds nothing (a waiter's) keeps its svid and oh
	// for its next call, then goes as any other at the end of that call
	return nil
}

// Confirm asks the server again for every held lock, as a plain LOCK of
// the same owner, which a server holding the lock grants at once (the
// ranges are the owner's own). A process that took the locks over (Adopt)
// calls it: the server may have restarted while they were handed over, its
// SM_NOTIFY reaching the process that held them then. A server in its
// grace period (NLM4_DENIED_GRACE_PERIOD) gets the held locks reclaimed
// (as after SM_NOTIFY); a lock the server refuses (another owner took it
// once the grace period ended) is lost: it is forgotten and logged. It
// returns once every lock was asked and any reclaim done, or ctx ended.
func (l *Locker) Confirm(ctx context.Context) {
	held := l.Held()
	if len(held) == 0 {
		return
	}
	grace := false
	l.rw.Lock()
	for _, h := range held {
		o := l.owner(h.Owner, 0)
		st, err := l.lockAgain(ctx, h, o, false)
		switch {
		case err != nil:
			klog.ErrorS(err, "NLM: held lock not confirmed", "server", l.srv.Server, "svid", o.svid, "start", h.Start, "end", h.End)
		case st == nlm.DeniedGracePeriod:
			grace = true
		case st != nlm.Granted:
			klog.ErrorS(statErr(st), "NLM: lock lost: the server refuses the held lock", "server", l.srv.Server, "svid", o.svid, "start", h.Start, "end", h.End)
			l.forget(h.FH, h.Owner, h.Start, h.End)
		}
		l.put(o)
		if grace || err != nil && ctx.Err() != nil {
			break
		}
	}
	l.rw.Unlock()
	if grace {
		l.reclaim("grace period after a takeover")
	}
}
