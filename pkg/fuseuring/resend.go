package fuseuring

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// resendBit is FUSE_UNIQUE_RESEND (include/uapi/linux/fuse.h, Linux
// 6.9): on FUSE_NOTIFY_RESEND, fs/fuse/dev.c (fuse_resend) moves every
// request of the connection's processing lists (read from /dev/fuse, not
// yet answered) back to the head of its pending list, ORs this bit into
// its unique and clears FR_SENT. The kernel's own uniques never carry it
// (a counter stepping by 2 from 0). A reply is matched to its request by
// the whole unique (fuse_request_find, with FUSE_INT_REQ_BIT, bit 0,
// cleared): once resent, a request is answered only under the unique of
// its copy, and a reply under the old unique is refused with ENOENT
// (while the copy is pending, too: the request is on no processing
// list).
const resendBit = uint64(1) << 63

// maxKeptBytes bounds the replies kept for copies not yet read
// (resendTracker.kept): 64 MiB.
const maxKeptBytes = 64 << 20

// ResendStats counts what became of the requests the kernel sent again
// (FUSE_NOTIFY_RESEND) to a server that tracks its requests (Adopt).
type ResendStats struct {
	// Joined are copies of a request this server was handling: not
	// handled again, the handler's reply answers the copy (also when
	// the request was read before tracking started: resendTracker.ours).
	Joined uint64
	// Replayed are copies of a request this server had answered after
	// the resend, before it read the copy (the reply was refused,
	// ENOENT): answered with that reply.
	Replayed uint64
	// Handled are copies of requests another process read (the one that
	// served the connection before): handled here.
	Handled uint64
	// Dropped are replies refused after a resend that could not be kept
	// (over 64 MiB kept, or no copy came): their copies, if any, are
	// handled again.
	Dropped uint64
}

// handling is a request being handled while requests are tracked: the
// unique go-fuse handles it under, and the unique to answer, which is a
// copy's once the kernel resent it.
type handling struct {
	as, reply uint64
}

// resendTracker keeps, from Adopt until the copies of a
// FUSE_NOTIFY_RESEND are read, the requests this server is handling, so
// that a request it reads twice (itself, then the kernel's copy) is
// handled once:
//   - a copy whose request is being handled here is joined to it: the
//     handler's reply carries the copy's unique;
//   - a reply refused (ENOENT) because the kernel resent its request
//     between the handler's start and the reply is kept until the copy
//     is read, and answers it, re-stamped;
//   - a copy of a request another process read is handled.
//
// Which request a copy is of is known by its unique (without
// FUSE_UNIQUE_RESEND). One goroutine reads /dev/fuse (readLoop), looks
// the tracker up once each read(2) has returned and registers the request
// before it reads the next, so a copy is never looked up while its
// request, read here, waits to be registered, and a tracker that starts
// while a read waits sees what it returns. What a tracker cannot see are
// the requests read before it existed: a
// tracker that starts while the server serves (Resend on a server not
// tracking, ours) was preceded by requests read here and not registered,
// some still in flight; every request of the connection being this
// server's, a copy found neither in flight nor kept is of one of those,
// and is joined to it too (awaiting): the request's reply, refused
// (ENOENT) since the kernel resent it, answers the copy; one refused
// before its copy is read is kept as a tracked one is. An adopted server
// tracks from its first read (Adopt); a copy found nowhere is then of a
// request the process before it read, handled here.
//
// The copies are at the head of the kernel's pending list once the
// notification is written, so the first request read by a read started
// after that which is no copy (nor INTERRUPT or FORGET, which the kernel
// sends before pending requests) ends the copies, as does finding nothing
// pending once it is written (awaitCopies): tracking stops, kept
// replies are dropped, and once the requests tracked until then are
// answered the server drops the tracker (Server.resends nil: the read
// loop then pays one atomic load a request).
type resendTracker struct {
	notifying atomic.Bool   // a FUSE_NOTIFY_RESEND is being written, or was
	sent      atomic.Bool   // a FUSE_NOTIFY_RESEND was written
	draining  atomic.Bool   // its copies are read: no new request is tracked
	dropped   atomic.Bool   // its counts are in Server.resendDone
	drained   chan struct{} // closed when draining starts (WaitResent)

	// ours: every request read from the connection before this tracker
	// started was read by this server (no other process read requests
	// that are not sent again): a copy found nowhere is of one of them.
	ours bool

	mu        sync.Mutex
	inflight  map[uint64]handling // by unique without resendBit
	kept      map[uint64][]byte   // refused replies, by unique without resendBit
	keptBytes int
	// awaiting are the copies (their unique) joined to an untracked
	// request in flight (ours), by unique without resendBit.
	awaiting map[uint64]uint64
	st       ResendStats
}

func newResendTracker(ours bool) *resendTracker {
	return &resendTracker{ours: ours, inflight: make(map[uint64]handling, 64), kept: make(map[uint64][]byte),
		awaiting: make(map[uint64]uint64), drained: make(chan struct{})}
}

// idleLocked reports whether no request tracked or joined by t awaits its
// reply. Called with t.mu held.
func (t *resendTracker) idleLocked() bool {
	return len(t.inflight) == 0 && len(t.awaiting) == 0
}

// readAction is what the read loop does with a request it read while
// requests are tracked.
type readAction int

const (
	readUntracked readAction = iota // handle it, not tracked
	readTracked                     // handle it, tracked (finish)
	readJoined                      // a copy of a request being handled here: drop it (its reply answers it)
	readReplay                      // a copy of a request answered here: write the kept reply
	readDrained                     // the copies are read: handle it, not tracked; drop the tracker
)

// read classifies the request of unique, read by a read that started
// after the notification was written (after) or not. For readReplay it
// returns the kept reply, stamped with unique.
func (t *resendTracker) read(unique uint64, after bool) (readAction, []byte) {
	if t.draining.Load() {
		return readUntracked, nil
	}
	base := unique &^ resendBit
	t.mu.Lock()
	defer t.mu.Unlock()
	if unique&resendBit != 0 {
		if h, ok := t.inflight[base]; ok {
			h.reply = unique
			t.inflight[base] = h
			t.st.Joined++
			return readJoined, nil
		}
		if r, ok := t.kept[base]; ok {
			delete(t.kept, base)
			t.keptBytes -= len(r)
			t.st.Replayed++
			binary.LittleEndian.PutUint64(r[8:], unique)
			return readReplay, r
		}
		if t.ours {
			// read here before tracking started, in flight
			t.awaiting[base] = unique
			t.st.Joined++
			return readJoined, nil
		}
		t.st.Handled++
	} else if after {
		t.drainLocked()
		if t.idleLocked() {
			return readDrained, nil
		}
		return readUntracked, nil
	}
	t.inflight[base] = handling{as: unique, reply: unique}
	return readTracked, nil
}

// drainLocked ends tracking: the copies were read; kept replies have no
// copy to answer any more. Called with t.mu held.
func (t *resendTracker) drainLocked() {
	if t.draining.Load() {
		return
	}
	t.draining.Store(true)
	close(t.drained)
	t.st.Dropped += uint64(len(t.kept))
	clear(t.kept)
	t.keptBytes = 0
}

// interruptTarget returns the unique go-fuse handles the request named
// unique under (an INTERRUPT of a joined copy names the copy).
func (t *resendTracker) interruptTarget(unique uint64) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	base := unique &^ resendBit
	if h, ok := t.inflight[base]; ok && (h.as == unique || h.reply == unique) {
		return h.as
	}
	if c, ok := t.awaiting[base]; ok && c == unique {
		return base
	}
	return unique
}

// stats returns the counts so far.
func (t *resendTracker) stats() ResendStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st
}

// copiesRead ends tracking once the read loop finds nothing pending
// after the notification (pending): every copy was read.
func (s *Server) copiesRead(t *resendTracker) {
	t.mu.Lock()
	t.drainLocked()
	empty := t.idleLocked()
	t.mu.Unlock()
	if empty {
		s.dropTracker(t)
	}
}

// copiesPoll is how often the read loop looks whether a notification
// being written is written (awaitCopies).
const copiesPoll = time.Millisecond

// awaitCopies returns, in the read loop, once a request (or INTERRUPT or
// FORGET) waits to be read (poll(2) POLLIN, or an error), or once t's
// copies are all read: the notification written, and nothing waiting, the
// copies (at the head of the pending list since the write) were read by
// this loop, and tracking ends (copiesRead). Until the notification is
// written it looks every copiesPoll: the last copy may be read before
// Resend marks it sent, and no request may follow to end tracking.
func (s *Server) awaitCopies(t *resendTracker) {
	for !t.draining.Load() {
		sent := t.sent.Load()
		wait := 0
		if !sent {
			wait = int(copiesPoll / time.Millisecond)
		}
		fds := [1]unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds[:], wait)
		switch {
		case err == unix.EINTR:
		case err != nil || n > 0:
			return
		case sent:
			s.copiesRead(t)
			return
		}
	}
}

// WaitResent waits until the copies the kernel queued for Resend (or
// ServeAdopted with resend) are read, or ctx ends, and returns
// ResendStats: Handled, Joined and Replayed are final then (Dropped may
// still grow while the requests tracked until then are answered). A
// server that tracks no request (never adopted, or its tracking over)
// returns at once; an adopted one whose Resend was not called yet waits
// for it. Errors: ctx's.
func (s *Server) WaitResent(ctx context.Context) (ResendStats, error) {
	if t := s.resends.Load(); t != nil {
		select {
		case <-t.drained:
		case <-ctx.Done():
			return s.ResendStats(), ctx.Err()
		}
	}
	return s.ResendStats(), nil
}

// trackResends makes the server track its requests (resendTracker) from
// its next read on; ours as resendTracker.ours.
func (s *Server) trackResends(ours bool) *resendTracker {
	t := newResendTracker(ours)
	s.resends.Store(t)
	return t
}

// ResendStats returns what became of the requests the kernel sent again;
// zero if this server never tracked its requests.
func (s *Server) ResendStats() ResendStats {
	s.resendMu.Lock()
	defer s.resendMu.Unlock()
	st := s.resendDone
	if t := s.resends.Load(); t != nil && !t.dropped.Load() {
		st.add(t.stats())
	}
	return st
}

func (a *ResendStats) add(b ResendStats) {
	a.Joined += b.Joined
	a.Replayed += b.Replayed
	a.Handled += b.Handled
	a.Dropped += b.Dropped
}

// finishTracked writes out, the reply to the tracked request base (its
// unique without resendBit), under the unique the kernel knows it by
// now, and stops tracking it; once the copies are read and no tracked
// request is left, the server drops t.
func (s *Server) finishTracked(t *resendTracker, base uint64, out []byte) {
	t.mu.Lock()
	h, ok := t.inflight[base]
	t.mu.Unlock()
	if !ok && len(out) >= outHdrSize {
		u := binary.LittleEndian.Uint64(out[8:])
		h = handling{as: u, reply: u}
	}
	var err error
	if len(out) >= outHdrSize {
		binary.LittleEndian.PutUint64(out[8:], h.reply)
		err = s.writeReply(out)
	}
	dropped := false
	t.mu.Lock()
	for err == unix.ENOENT {
		// resent since: joined to its copy meanwhile, or the copy is
		// still to be read
		if now := t.inflight[base]; now.reply != h.reply {
			h = now
			binary.LittleEndian.PutUint64(out[8:], h.reply)
			t.mu.Unlock()
			err = s.writeReply(out)
			t.mu.Lock()
			continue
		}
		if !t.draining.Load() && t.keptBytes+len(out) <= maxKeptBytes {
			t.kept[base] = append([]byte(nil), out...)
			t.keptBytes += len(out)
		} else {
			t.st.Dropped++
			dropped = true
		}
		err = nil
	}
	delete(t.inflight, base)
	done := t.draining.Load() && t.idleLocked()
	t.mu.Unlock()
	if dropped {
		s.opts.Logger.Printf("fuseuring: reply to request %d refused after a resend and not kept: its copy, if any, is handled again", h.as)
	}
	if err != nil && err != unix.ENODEV {
		s.opts.Logger.Printf("fuseuring: write /dev/fuse: %v", err)
	}
	if done {
		s.dropTracker(t)
	}
}

// refusedUntracked handles the reply out to an untracked request that
// the kernel refused (ENOENT) while t tracks: the request was read before
// t started and the kernel resent it (resendTracker.ours). The reply
// answers its copy, re-stamped, if the copy was read (awaiting), or is
// kept for it.
func (s *Server) refusedUntracked(t *resendTracker, out []byte) {
	base := binary.LittleEndian.Uint64(out[8:]) &^ resendBit
	t.mu.Lock()
	c, ok := t.awaiting[base]
	if !ok {
		if !t.ours {
			t.mu.Unlock() // no copy of it is looked for: an aborted request
			return
		}
		if !t.draining.Load() && t.keptBytes+len(out) <= maxKeptBytes {
			t.kept[base] = append([]byte(nil), out...)
			t.keptBytes += len(out)
			t.mu.Unlock()
			return
		}
		t.st.Dropped++
		t.mu.Unlock()
		s.opts.Logger.Printf("fuseuring: reply to request %d refused after a resend and not kept: its copy, if any, is handled again", base)
		return
	}
	delete(t.awaiting, base)
	done := t.draining.Load() && t.idleLocked()
	t.mu.Unlock()
	binary.LittleEndian.PutUint64(out[8:], c)
	if err := s.writeReply(out); err != nil && err != unix.ENOENT && err != unix.ENODEV {
		s.opts.Logger.Printf("fuseuring: write /dev/fuse: %v", err)
	}
	if done {
		s.dropTracker(t)
	}
}

// dropTracker ends tracking for good once t's copies are read and its
// requests answered: its counts are kept and logged.
func (s *Server) dropTracker(t *resendTracker) {
	s.resends.CompareAndSwap(t, nil)
	st := t.stats()
	s.resendMu.Lock()
	first := !t.dropped.Swap(true)
	if first {
		s.resendDone.add(st)
	}
	s.resendMu.Unlock()
	if first && t.sent.Load() {
		s.opts.Logger.Printf("fuseuring: %s: requests sent again by the kernel: %d handled, %d joined to the request in flight, %d answered with a reply kept for them, %d replies dropped",
			s.dir, st.Handled, st.Joined, st.Replayed, st.Dropped)
	}
}

// writeReply writes a reply to /dev/fuse, retrying EINTR; errors are the
// write's, ENOENT included (no request of that unique is waiting).
func (s *Server) writeReply(b []byte) error {
	for {
		_, err := unix.Write(s.fd, b)
		if err != unix.EINTR {
			return err
		}
	}
}
