package volumes

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// Options configures a Registry.
type Options struct {
	// Root is the local directory the export server serves; volume paths
	// are relative to it.
	Root string
	// StateDir is the directory where the registry (volumes, quotas,
	// client lists, snapshots, clones and credit grants) is kept, in
	// StateDir/state.json, written atomically; New restores it. Empty:
	// the registry lives in memory only. It is created (mode 0700) if
	// missing, and must not be beneath Root. New walks every registered
	// volume's tree to count its usage before it returns.
	StateDir string
	// SnapshotDir holds the snapshots' trees, one directory per snapshot
	// id; empty means StateDir/snapshots (and no snapshots at all when
	// StateDir is empty too). It must not be beneath Root, so that no NFS
	// client reaches a snapshot; reflinks (FICLONE) are used when it is on
	// Root's file system, plain copies otherwise.
	SnapshotDir string
	// CopyJobs bounds the snapshot and clone copies running at once; 0
	// means 2. Further jobs wait, with no progress, until one ends.
	CopyJobs int
	// Version is reported by the admin API's status.
	Version string
}

// Export is a registered volume's export as the protocol server installs
// it: Path is "/"+the volume path, Clients and ReadOnlyClients the
// addresses of the nodes granted (an empty list allows nobody), Nodes and
// ReadOnlyNodes their names (admin.Access.Name), Dev and
// Ino the directory it was found at, and Volume the quota every modifying
// call through the export goes through. Missing marks a volume whose
// directory was not found: it is not exported, but its path stays taken
// (no static export may overlap it).
type Export struct {
	Path            string
	Clients         []netip.Prefix
	ReadOnlyClients []netip.Prefix
	Nodes           []string
	ReadOnlyNodes   []string
	Dev, Ino        uint64
	Volume          *Volume
	Missing         bool
}

// Exporter is the protocol server, as the registry drives it. The
// registry calls it with its own lock held; the exporter takes only its
// own locks and never calls back into the registry.
type Exporter interface {
	// SetVolumeExports replaces the volume exports (every registered
	// volume, sorted by path) atomically; on error (a directory that
	// cannot be resolved, an export id taken, an overlap with a static
	// export) nothing changes.
	SetVolumeExports(exps []Export) error
	// StaticOverlap returns an error naming the static export, other than
	// "/", that volume path p (relative to the root) equals, contains or
	// lies in; nil when there is none.
	StaticOverlap(p string) error
	// SetMachineGrants applies the RPC-over-RDMA credit grants per
	// machine name (admin.Credits) to the NFS/RDMA connections.
	SetMachineGrants(grants map[string]int)
	// Connections returns the NFS/RDMA connections with their credits.
	Connections() []admin.Connection
}

// Registry is the export server's volumes with their quotas, client
// lists, snapshots and clones, and the credit grants, kept in a state
// file. It implements admin.Service. Its methods are safe for concurrent
// use.
type Registry struct {
	root    string
	rootFD  int // descriptor of Root, for open_by_handle_at and walks
	version string

	// mu guards the maps and each volume's registry fields; it is taken
	// before the exporter's locks (Exporter), never after.
	mu        sync.Mutex
	vols      map[string]*Volume
	snaps     map[string]*snapRec
	clones    map[string]*cloneRec
	credits   map[string]int // RPC-over-RDMA credits per machine name
	stateFile string         // "": not persisted
	snapDir   string         // "": no snapshots
	exp       Exporter       // nil until Attach

	files  fileLocks
	jobs   jobRunner
	closed atomic.Bool
}

// New opens opts.Root, restores the registry from opts.StateDir (each
// volume's usage counted by a walk of its tree) and starts again the
// copies and deletions a restart interrupted. Its volumes are exported
// once an exporter is attached (Attach).
func New(opts Options) (*Registry, error) {
	fd, err := unix.Open(opts.Root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("volumes: root %q: %w", opts.Root, err)
	}
	r := &Registry{root: opts.Root, rootFD: fd, version: opts.Version}
	if err := r.init(opts); err != nil {
		r.jobs.stop()
		unix.Close(fd)
		return nil, err
	}
	r.jobs.startPending(r)
	return r, nil
}

// Attach makes e the exporter of the registry's volumes: it installs the
// volume exports and the credit grants. Call it once, before serving;
// on error (see Exporter.SetVolumeExports) nothing is attached.
func (r *Registry) Attach(e Exporter) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exp = e
	if err := r.publishLocked(); err != nil {
		r.exp = nil
		return err
	}
	e.SetMachineGrants(r.credits)
	return nil
}

// publishLocked installs the registered volumes' exports in the exporter.
// r.mu is held.
func (r *Registry) publishLocked() error {
	if r.exp == nil {
		return nil
	}
	vs := r.sortedVolumes()
	list := make([]Export, len(vs))
	for i, v := range vs {
		list[i] = v.exportLocked()
	}
	return r.exp.SetVolumeExports(list)
}

// Close cancels the running snapshot and clone copies (they are resumed
// by the next New on the same StateDir), waits for them, and releases the
// root descriptor. Call it after the protocol server has stopped serving.
func (r *Registry) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.jobs.stop()
	return unix.Close(r.rootFD)
}

// ParsePrefix parses an IP address (a single-address prefix) or a CIDR.
func ParsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}
