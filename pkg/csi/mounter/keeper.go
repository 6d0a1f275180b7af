package mounter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

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
