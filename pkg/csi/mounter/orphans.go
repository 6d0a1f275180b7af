package mounter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// The mounter's side of the node's Keeper (keeper.go): the mounts whose
// processes died out of its watch taken up on the keeper's duplicates,
// the ones it gives up let go there, and the duplicates a restarted node
// plugin asks back for (OpDuplicate).

// keeperWait bounds how long a starting mounter waits for the keeper's
// socket to answer (the node plugin may be restarting too).
const keeperWait = 30 * time.Second

// recoverOrphan takes m up on the keeper's duplicate of its connection
// after its process died outside this mounter's watch (with a previous
// mounter's container, or adopted): driver mount --recover. Without a
// kept connection, or when the recovery fails, m's state is removed (and
// the keeper told to let the connection go).
func (s *Server) recoverOrphan(ctx context.Context, m Mount) {
	f, err := s.fetchKept(ctx, m.Target)
	if err != nil {
		klog.InfoS("mounter: a mount whose process died is not taken up again", "target", m.Target, "pid", m.PID, "reason", err)
		s.dropState(m)
		return
	}
	t0 := time.Now()
	nm, err := s.launch(ctx, m, f, modeRecover)
	f.Close()
	if err != nil {
		klog.ErrorS(err, "mounter: recovery failed: the mount ends", "target", m.Target)
		s.dropState(m)
		s.forgetKept(m.Target)
		return
	}
	klog.InfoS("mounter: mount taken up again after its process died", "target", m.Target, "oldPID", m.PID, "pid", nm.PID, "took", time.Since(t0))
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
func (s *Server) fetchKept(ctx context.Context, target string) (*os.File, error) {
	kc := &Client{Socket: s.Keeper}
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
