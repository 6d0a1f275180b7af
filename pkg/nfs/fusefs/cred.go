package fusefs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// callers maps the process behind a FUSE request to the AUTH_SYS
// credential (RFC 5531 appendix A) its NFS calls carry: its uid and gid
// from the FUSE request header and its supplementary groups from
// /proc/PID/status (at most 16, as AUTH_SYS carries, like Linux's client),
// so that the server checks permissions as that user, as with a kernel NFS
// mount. Entries are kept per pid for groupsTTL and at most maxCallers.
type callers struct {
	machine string
	mu      sync.Mutex
	byPID   map[uint32]callerEntry
}

type callerEntry struct {
	uid, gid uint32
	cred     *client.Cred
	key      string // uid, gid and groups: the access cache's key (access.go)
	at       time.Time
}

const (
	groupsTTL  = time.Second
	maxCallers = 4096
)

func newCallers(machine string) *callers {
	return &callers{machine: machine, byPID: make(map[uint32]callerEntry)}
}

// as returns the credential of the FUSE request's caller and its key
// (credKey), or nil and "" when ctx carries no caller (the mount's
// credential is used).
func (s *fsys) as(ctx context.Context) (*client.Cred, string) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return nil, ""
	}
	return s.callers.cred(c.Uid, c.Gid, c.Pid)
}

// credKey is the identity of an AUTH_SYS credential for the access cache:
// uid, gid and supplementary groups, as Linux's access cache compares
// credentials (the machine name is the mount's).
func credKey(uid, gid uint32, groups []uint32) string {
	b := make([]byte, 0, 4*(2+len(groups)))
	for _, v := range append([]uint32{uid, gid}, groups...) {
		b = append(b, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return string(b)
}

func (cs *callers) cred(uid, gid, pid uint32) (*client.Cred, string) {
	now := time.Now()
	cs.mu.Lock()
	e, ok := cs.byPID[pid]
	cs.mu.Unlock()
	if ok && e.uid == uid && e.gid == gid && now.Sub(e.at) < groupsTTL {
		return e.cred, e.key
	}
	groups, err := procGroups(pid)
	if err != nil {
		klog.V(3).InfoS("fusefs: no supplementary groups for caller", "pid", pid, "err", err)
	}
	if len(groups) > 16 {
		groups = groups[:16]
	}
	cred, err := client.NewCred(sunrpc.AuthSysParams{MachineName: cs.machine, UID: uid, GID: gid, GIDs: groups})
	if err != nil {
		klog.ErrorS(err, "fusefs: caller credential", "uid", uid, "gid", gid)
		return nil, ""
	}
	key := credKey(uid, gid, groups)
	cs.mu.Lock()
	if len(cs.byPID) >= maxCallers {
		clear(cs.byPID)
	}
	cs.byPID[pid] = callerEntry{uid: uid, gid: gid, cred: cred, key: key, at: now}
	cs.mu.Unlock()
	return cred, key
}

// procGroups reads the supplementary groups of pid (the Groups: line of
// /proc/PID/status).
func procGroups(pid uint32) ([]uint32, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		var gs []uint32
		for _, w := range strings.Fields(rest) {
			g, err := strconv.ParseUint(w, 10, 32)
			if err != nil {
				return nil, err
			}
			gs = append(gs, uint32(g))
		}
		return gs, nil
	}
	return nil, sc.Err()
}
