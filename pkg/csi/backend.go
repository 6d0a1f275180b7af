package csi

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// ServerPorts are the ports of the export servers the controller manages.
type ServerPorts struct {
	NFS   int // NFSv3 over TCP (the controller's own connection), default nfs3.Port
	RDMA  int // NFSv3 over RPC-over-RDMA (what nodes use), default nfs3.RDMAPort
	Mount int // MOUNT v3 over TCP, default mount3.Port
	NLM   int // NLM v4 over TCP (file locks), default nlm.Port in the driver's flags; 0: not given to mounts (they ask the server's rpcbind)
	Admin int // the export server's admin API; 0: none (a third-party server)
}

// backend is the controller's connection to one share of one server: for
// our export server the admin API client, for a third-party server a
// user-space NFS client over TCP (no kernel mount).
type backend struct {
	server string
	share  string
	nfs    *client.Client // a third-party NFS server's share; nil with an admin API
	admin  *admin.Client  // nil: a third-party NFS server (no quota, ACL, snapshots)
}

// backends caches one backend per server and share.
type backends struct {
	ports ServerPorts
	token admin.TokenSource // nil: no admin API
	// callTimeout bounds each NFS call of the controller (soft mount).
	callTimeout time.Duration

	mu sync.Mutex
	m  map[string]*backend
	// known servers, for ListVolumes, ListSnapshots and GetCapacity
	// without parameters: given at start and seen in calls, and those
	// of the volume handles handles returns (nil: none).
	known   map[string]struct{}
	handles func() ([]string, error)
}

func newBackends(ports ServerPorts, token admin.TokenSource, servers []string, handles func() ([]string, error)) *backends {
	b := &backends{ports: ports, token: token, callTimeout: 15 * time.Second, m: map[string]*backend{}, known: map[string]struct{}{}, handles: handles}
	for _, s := range servers {
		b.known[s] = struct{}{}
	}
	return b
}

// servers returns the servers the controller knows of, sorted: those
// seen, and those of the PersistentVolumes' handles. Errors: the volume
// handles' source's (Unavailable).
func (bs *backends) servers() ([]string, error) {
	set := map[string]struct{}{}
	if bs.handles != nil {
		hs, err := bs.handles()
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "the servers of the PersistentVolumes are not known yet: %v", err)
		}
		for _, h := range hs {
			// another format: not ours to list
			if id, err := parseVolumeID(h); err == nil {
				set[id.Server] = struct{}{}
			}
		}
	}
	for _, s := range bs.seen() {
		set[s] = struct{}{}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}

// seen returns the servers given at start and those named in calls since.
func (bs *backends) seen() []string {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	out := make([]string, 0, len(bs.known))
	for s := range bs.known {
		out = append(out, s)
	}
	return out
}

// adminClient returns the admin client of server, or nil when the
// controller is configured without one (ports.Admin 0 or no token: the
// admin API is never served without a token).
func (bs *backends) adminClient(server string) *admin.Client {
	if bs.ports.Admin == 0 || bs.token == nil {
		return nil
	}
	u := "http://" + net.JoinHostPort(server, strconv.Itoa(bs.ports.Admin))
	return admin.NewTokenClient(u, bs.token, nil)
}

// CreditPusher returns the credits.Config.Push that gives an export
// server its pods' credit grants through its admin API (PUT /v1/credits
// on ports.Admin with token), or nil when there is no admin API
// (ports.Admin 0 or no token: third-party servers, nothing to push).
func CreditPusher(ports ServerPorts, token admin.TokenSource) func(ctx context.Context, server string, grants map[string]int) error {
	if ports.Admin == 0 || token == nil {
		return nil
	}
	bs := &backends{ports: ports, token: token}
	return func(ctx context.Context, server string, grants map[string]int) error {
		return bs.adminClient(server).SetCredits(ctx, grants)
	}
}

// get returns the backend of server and share. For our export server (an
// admin API is configured) that is the admin API client alone: every
// volume operation goes through it and the controller needs no NFS
// access to the server. For a third-party server it mounts the share
// (MOUNT and FSINFO over TCP) on first use. A dead connection is replaced
// on the next call that fails.
func (bs *backends) get(ctx context.Context, server, share string) (*backend, error) {
	key := server + idSep + share
	bs.mu.Lock()
	bs.known[server] = struct{}{}
	b := bs.m[key]
	bs.mu.Unlock()
	if b != nil {
		return b, nil
	}
	b = &backend{server: server, share: share, admin: bs.adminClient(server)}
	if b.admin != nil {
		// Whether the server has an admin API is configuration (ports.Admin
		// and the token, adminClient): a refused connection (the export
		// server starts NFS before its admin listener) is an error the CO
		// retries, never a cached "third-party server" verdict.
		if _, err := b.admin.Status(ctx); err != nil {
			return nil, fmt.Errorf("admin API of %s: %w", server, err)
		}
	} else {
		retry := sunrpc.RetryPolicy{Soft: true, Retries: 2, Timeout: bs.callTimeout}
		c, err := client.Mount(ctx, client.Options{
			Server: server, Export: share, NFSPort: bs.ports.NFS, MountPort: bs.ports.Mount,
			AuthSys: sunrpc.AuthSysParams{MachineName: "nfsrdma-controller"},
			Retry:   retry,
		})
		if err != nil {
			return nil, fmt.Errorf("mount %s:%s: %w", server, share, err)
		}
		b.nfs = c
	}
	bs.mu.Lock()
	if o := bs.m[key]; o != nil {
		bs.mu.Unlock()
		b.close()
		return o, nil
	}
	bs.m[key] = b
	bs.mu.Unlock()
	klog.InfoS("controller: connected to export server", "server", server, "share", share, "admin", b.admin != nil)
	return b, nil
}

// close closes b's NFS connection, if it has one.
func (b *backend) close() {
	if b.nfs != nil {
		_ = b.nfs.Close()
	}
}

// drop forgets b after a connection error, so the next call reconnects.
func (bs *backends) drop(b *backend) {
	bs.mu.Lock()
	key := b.server + idSep + b.share
	if bs.m[key] == b {
		delete(bs.m, key)
	}
	bs.mu.Unlock()
	b.close()
}

// close closes every connection.
func (bs *backends) close() {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for k, b := range bs.m {
		b.close()
		delete(bs.m, k)
	}
}
