package fusefs

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
)

// InterruptGrace is how long the NFS calls of a FUSE request go on after
// the kernel interrupted the request (FUSE_INTERRUPT: the caller got a
// signal), 30 s. An interrupted request is not abandoned at once, as
// Linux's NFS client does not abandon an RPC for a signal that does not
// kill the caller: answering EINTR while the call may still reach the
// server would report a CREATE, REMOVE, RENAME or COMMIT as failed
// (close(2) failing, open(O_EXCL) retried by the caller failing with
// EEXIST, unlink retried failing with ENOENT) when it took place; and
// callers that set SA_RESTART do not expect EINTR from a regular file.
// Past the grace (a server that does not answer), the request ends with
// EINTR so that its goroutine is free. The grace is measured by a watcher
// that looks at the requests in flight every grace/30 (1 s), so it ends up
// to one such tick late.
//
// A caller that is being killed (SIGKILL pending, as /proc/PID/status
// shows) gets no grace: FUSE waits uninterruptibly for the answer to a
// request it already passed to us, so the caller could not die until we
// answer, while nobody will read the outcome. Its request ends at the
// next tick, as a hard Linux NFS mount lets SIGKILL end an RPC wait
// (TASK_KILLABLE). A caller outside our PID namespace (FUSE reports pid
// 0) keeps the grace.
const InterruptGrace = 30 * time.Second

// interrupts is the watcher of one mount's FUSE requests in flight: it
// cancels the NFS calls of a request a grace after go-fuse closed the
// request's cancel channel (FUSE_INTERRUPT, or the end of the FUSE
// connection, when go-fuse cancels every request in flight). One
// goroutine per mount looks at every request each tick, so that a request
// costs a map insert and delete, not a goroutine of its own (what
// context.AfterFunc on go-fuse's context, which is not a standard one,
// would start).
type interrupts struct {
	mu    sync.Mutex
	grace time.Duration // guarded by mu (a test shortens it)
	reqs  map[*request]struct{}
}

// request is one FUSE request in flight.
type request struct {
	interrupted <-chan struct{}    // go-fuse's cancel channel of the request
	cancel      context.CancelFunc // cancels the request's NFS calls
	pid         uint32             // the caller's thread (0: unknown)
	since       time.Time          // when the watcher first saw it interrupted
}

func newInterrupts(grace time.Duration) *interrupts {
	return &interrupts{grace: grace, reqs: make(map[*request]struct{})}
}

// tick is how often the watcher looks: grace/30, between 10 ms and 1 s.
func (in *interrupts) tick() time.Duration {
	in.mu.Lock()
	g := in.grace
	in.mu.Unlock()
	return min(max(g/30, 10*time.Millisecond), time.Second)
}

// watch cancels interrupted requests past the grace until ctx ends.
func (in *interrupts) watch(ctx context.Context) {
	t := time.NewTicker(in.tick())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			in.scan(now)
		}
	}
}

// scan cancels the requests interrupted for at least the grace at now,
// and those whose caller is being killed. The callers' /proc files are
// read after in.mu is released: every FUSE request takes it (add, remove).
func (in *interrupts) scan(now time.Time) {
	var check []*request
	in.mu.Lock()
	for r := range in.reqs {
		select {
		case <-r.interrupted:
		default:
			continue
		}
		if r.since.IsZero() {
			r.since = now
		}
		if now.Sub(r.since) >= in.grace {
			r.cancel()
		} else if r.pid != 0 {
			check = append(check, r)
		}
	}
	in.mu.Unlock()
	for _, r := range check {
		if killed(r.pid) {
			r.cancel() // harmless when the request ended meanwhile
		}
	}
}

func (in *interrupts) add(interrupted <-chan struct{}, cancel context.CancelFunc, pid uint32) *request {
	r := &request{interrupted: interrupted, cancel: cancel, pid: pid}
	in.mu.Lock()
	in.reqs[r] = struct{}{}
	in.mu.Unlock()
	return r
}

func (in *interrupts) remove(r *request) {
	in.mu.Lock()
	delete(in.reqs, r)
	in.mu.Unlock()
}

// call returns the context of the NFS calls of one FUSE request: the
// caller's credential (as), cancelled InterruptGrace after go-fuse
// cancels the request (see interrupts), or at once when the mount's
// background context ends (unmount); op.done must be called when
// the request ends.
func (s *fsys) call(ctx context.Context) (context.Context, fuseOp) {
	parent := s.bg
	if cred, key := s.as(ctx); cred != nil {
		parent = withCaller(client.WithCred(parent, cred), key)
	}
	c, cancel := context.WithCancel(parent)
	interrupted := ctx.Done()
	if interrupted == nil { // not a FUSE request
		return c, fuseOp{cancel: cancel}
	}
	var pid uint32
	if fc, ok := fuse.FromContext(ctx); ok {
		pid = fc.Pid
	}
	return c, fuseOp{cancel: cancel, intr: s.intr, r: s.intr.add(interrupted, cancel, pid)}
}

// fuseOp is the NFS context of one FUSE request in progress (fsys.call).
type fuseOp struct {
	cancel context.CancelFunc
	intr   *interrupts
	r      *request // nil when not a FUSE request
}

// done ends the request: it is no longer watched for interrupts and its
// NFS context is cancelled.
func (o fuseOp) done() {
	if o.r != nil {
		o.intr.remove(o.r)
	}
	o.cancel()
}

// sigKill is SIGKILL's bit in the pending-signal masks of /proc/PID/status.
const sigKill = 1 << (9 - 1)

// killed reports whether thread pid has SIGKILL pending (its own or its
// process's: /proc/PID/status SigPnd and ShdPnd, hexadecimal masks), i.e.
// is being killed. An unknown pid (0), or one that cannot be read, is
// not.
func killed(pid uint32) bool {
	if pid == 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		if m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && m&sigKill != 0 {
			return true
		}
	}
	return false
}
