package mounter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/internal/unixsock"
)

// Keeper holds a duplicate of the /dev/fuse descriptor of each mount's
// connection in a process outside the mounter's container (the node
// plugin), so that a connection outlives the death of that container
// with every mount process in it: Linux keeps a FUSE connection while any
// process holds a descriptor of it (fs/fuse/dev.c, fuse_dev_release
// aborts it on the last close). The restarted mounter fetches each
// (OpFetch) and starts a `driver mount --recover` on it; it makes the
// keeper let one go (OpForget) when it gives the mount up, so that its
// callers then get ENOTCONN instead of waiting.
//
// Wire protocol: the mounter's (package doc), on Socket, with the ops
// OpFetch and OpForget.
type Keeper struct {
	// Socket is the path of the unix socket to listen on.
	Socket string

	mu    sync.Mutex
	conns map[string]*os.File // by target
}

// Keep stores a duplicate of f, the connection mounted on target,
// replacing (and closing) the one kept for target before.
func (k *Keeper) Keep(target string, f *os.File) error {
	d := dupFile(f)
	if d == nil {
		return fmt.Errorf("keeper: no duplicate of the connection of %s", target)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conns == nil {
		k.conns = map[string]*os.File{}
	}
	target = filepath.Clean(target)
	if old := k.conns[target]; old != nil {
		old.Close()
	}
	k.conns[target] = d
	return nil
}

// Forget closes the duplicate kept for target, if any.
func (k *Keeper) Forget(target string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	target = filepath.Clean(target)
	if f := k.conns[target]; f != nil {
		f.Close()
		delete(k.conns, target)
	}
}

// Kept lists the targets whose connections are kept, sorted.
func (k *Keeper) Kept() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]string, 0, len(k.conns))
	for t := range k.conns {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// fetch returns a duplicate of target's kept connection.
func (k *Keeper) fetch(target string) (*os.File, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f := k.conns[filepath.Clean(target)]
	if f == nil {
		return nil, ErrNotKept
	}
	d := dupFile(f)
	if d == nil {
		return nil, fmt.Errorf("keeper: no duplicate of the connection of %s", target)
	}
	return d, nil
}

// Run listens on k.Socket and answers OpFetch and OpForget until ctx
// ends; the duplicates stay kept when it returns.
func (k *Keeper) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(k.Socket), 0o755); err != nil {
		return fmt.Errorf("keeper: %w", err)
	}
	l, err := unixsock.Listen("unixpacket", k.Socket, 0o600)
	if err != nil {
		return fmt.Errorf("keeper: %w", err)
	}
	klog.InfoS("keeper: listening", "socket", k.Socket)
	return serveListener(ctx, l, "keeper", k.handle)
}

func (k *Keeper) handle(_ context.Context, req Request, _ []*os.File) (Response, *os.File) {
	switch req.Op {
	case OpFetch:
		f, err := k.fetch(req.Mount.Target)
		if err != nil {
			return Response{Error: err.Error()}, nil
		}
		klog.InfoS("keeper: connection handed to the mounter", "target", req.Mount.Target)
		return Response{}, f
	case OpForget:
		k.Forget(req.Mount.Target)
		klog.InfoS("keeper: connection let go at the mounter's word", "target", req.Mount.Target)
		return Response{}, nil
	default:
		return Response{Error: fmt.Sprintf("unknown op %q", req.Op)}, nil
	}
}

// keeperWait bounds how long a starting mounter waits for the keeper's
// socket to answer (the node plugin may be restarting too).
const keeperWait = 30 * time.Second

// recoverOrphans takes up, on the keeper's duplicates of their
// connections, the mounts recorded in StateDir whose processes died with
// a previous mounter (driver mount --recover: the kernel queues again
// the requests they had read). A mount the keeper holds no connection of
// is forgotten (it was unmounted meanwhile, or the node plugin restarted
// too and lost it).
func (s *Server) recoverOrphans(ctx context.Context) {
	s.mu.Lock()
	orphans := s.orphans
	s.orphans = nil
	s.mu.Unlock()
	if len(orphans) == 0 {
		return
	}
	for _, m := range orphans {
		s.recoverOrphan(ctx, m)
	}
}

// recoverOrphan takes m up on the keeper's duplicate of its connection
// after its process died outside this mounter's watch (driver mount
// --recover), and reports whether it did. Without a kept connection, or
// when the recovery fails, m's state is removed (and the keeper told to
// let the connection go).
func (s *Server) recoverOrphan(ctx context.Context, m Mount) bool {
	f, err := s.fetchKept(ctx, &Client{Socket: s.Keeper}, m.Target)
	if err != nil {
		klog.InfoS("mounter: a mount whose process died is not taken up again", "target", m.Target, "pid", m.PID, "reason", err)
		s.dropState(m)
		return false
	}
	t0 := time.Now()
	nm, err := s.launch(ctx, m, f, modeRecover)
	f.Close()
	if err != nil {
		klog.ErrorS(err, "mounter: recovery failed: the mount ends", "target", m.Target)
		s.dropState(m)
		s.forgetKept(m.Target)
		return false
	}
	klog.InfoS("mounter: mount taken up again after its process died", "target", m.Target, "oldPID", m.PID, "pid", nm.PID, "took", time.Since(t0))
	return true
}

// dropState removes m's state file unless it records another process.
func (s *Server) dropState(m Mount) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.superseded(&proc{m: m}) {
		return
	}
	_ = os.Remove(s.statePath(m.Target))
}

// fetchKept fetches the keeper's duplicate of target's connection,
// waiting up to keeperWait for a keeper whose socket is there to answer.
func (s *Server) fetchKept(ctx context.Context, kc *Client, target string) (*os.File, error) {
	deadline := time.Now().Add(keeperWait)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		f, err := kc.Fetch(cctx, target)
		cancel()
		// no socket file: no keeper on this node
		if err == nil || errors.Is(err, ErrNotKept) || errors.Is(err, syscall.ENOENT) || ctx.Err() != nil || time.Now().After(deadline) {
			return f, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// forgetKept makes the keeper let target's connection go (when a keeper
// is set): the mount was given up, and its callers must get ENOTCONN.
func (s *Server) forgetKept(target string) {
	if s.Keeper == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := (&Client{Socket: s.Keeper}).Forget(ctx, target); err != nil {
		klog.ErrorS(err, "mounter: the keeper did not let a given-up connection go: its callers wait until it is unmounted", "target", target)
	}
}

// duplicate returns a duplicate of target's connection (OpDuplicate).
func (s *Server) duplicate(target string) (*os.File, error) {
	s.mu.Lock()
	p := s.mounts[filepath.Clean(target)]
	var f *os.File
	if p != nil && p.fuse != nil {
		f = dupFile(p.fuse)
	}
	s.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("%s is not served", target)
	}
	if f != nil {
		return f, nil
	}
	return fuseOf(p.m.PID)
}
