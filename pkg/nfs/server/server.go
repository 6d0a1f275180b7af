package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockd"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// Transfer sizes advertised in FSINFO (RFC 1813 section 3.3.19), bytes.
const (
	MaxIO       = 1 << 20 // rtmax, wtmax
	PrefReaddir = 64 << 10
)

// Options configures a Server.
type Options struct {
	// Root is the local directory served; export paths are under it.
	Root string
	// Exports is the initial export table (see SetExports).
	Exports []Export
	// HandleKey is the secret that authenticates file handles (any length;
	// 32 random bytes are plenty). It must stay the same across restarts for
	// handles to survive them. Empty: a key derived from the root
	// directory's kernel handle, secret from every client that cannot reach
	// the root itself (set a key when "/" is exported next to other exports).
	HandleKey []byte
	// Logger receives the RPC layer's logs; nil means klog.
	Logger *slog.Logger

	// Volumes is the volume registry whose volumes are exported besides
	// the static exports (package volumes); nil: none. New attaches the
	// server to it (Volumes.Attach) before it installs the static exports,
	// so that one overlapping a volume is an error.
	Volumes Volumes
	// DRCEntries bounds the replies the duplicate request cache keeps (0:
	// DefaultDRCEntries); DRCExpiry is how long one is kept after its last
	// use (0: DefaultDRCExpiry). See drc.go.
	DRCEntries int
	DRCExpiry  time.Duration

	// Locks configures the NLM v4 and NSM v1 lock manager (package lockd):
	// its state directory, grace period, callbacks. New sets its FileKey
	// (locks are per file, whichever export's handle names it; a handle
	// that does not verify is NLM4_STALE_FH, a client outside the export's
	// list NLM4_FAILED) and, when nil, its Logger.
	Locks lockd.Options

	// ReadMapBytes bounds the bytes of files mapped to answer READ from
	// the page cache without a copy (windows of ReadMapWindow bytes, least
	// recently used unmapped first; less than one window is one window).
	// 0: READ copies the data with pread(2).
	ReadMapBytes int64

	// TLS offers RPC-with-TLS (RFC 9289) on the TCP services Serve and
	// ServeLocks serve: the server's certificate and ClientCAs, the
	// authorities of the nodes' certificates (a client's verified
	// certificate names it for the exports' Nodes). Nil: plaintext only.
	TLS *tls.Config
	// TLSRequired makes NFS, MOUNT and NLM over TCP require RPC-with-TLS
	// with a client certificate that verifies (sunrpc.XprtSecMTLS: calls
	// of a plaintext connection are denied AUTH_TOOWEAK), and a volume
	// export (ExplicitClients) admits a node by its certificate's name
	// only, never by its address alone. NSM stays optional (SM_NOTIFY
	// from clients that do not speak TLS). It needs TLS. RPC-over-RDMA
	// connections (ServeRDMA) cannot carry TLS: serve none with it.
	TLSRequired bool
}

// Server is an NFSv3 + MOUNT v3 export server over a local directory. Its
// methods are safe for concurrent use.
type Server struct {
	root   string
	rootFD int // descriptor of Root (not O_PATH: open_by_handle_at refuses one as mount_fd with EBADF)
	rpc    *sunrpc.Server
	seal   *sealer
	log    *slog.Logger
	wverf  nfs3.WriteVerf

	mu      sync.Mutex // guards the mount list
	exports atomic.Pointer[exportTable]
	mounts  []mount3.MountEntry

	// tmu serialises changes of the export table and guards the static
	// and the volume exports. The registry calls SetVolumeExports and
	// StaticOverlap with its own lock held: tmu is taken after it, and the
	// server never calls the registry while holding tmu.
	tmu      sync.Mutex
	static   []*export
	vols     []*export // the registry's volume exports (SetVolumeExports)
	volPaths []string  // every registered volume's path, exported or not

	rdmaMu  sync.Mutex
	rdma    rdmaListener   // the ServeRDMA listener
	credits map[string]int // RPC-over-RDMA credits per machine name (SetMachineGrants)

	drc   *replyCache
	rmap  *readMap   // READ's mappings (readmap.go)
	files *fileCache // READ's and WRITE's open files (filecache.go)

	locks     *lockd.Manager
	locksOnce sync.Once

	tls      *tls.Config // Options.TLS
	nameOnly bool        // Options.TLSRequired

	refusals *refusalLog // calls refused for the client (refusals.go)

	// euid and egid are the server's own ids: the owner a new object
	// has before the server makes it the caller's (created)
	euid, egid uint32

	closed atomic.Bool
}

// New opens opts.Root, checks that its file system supports file handles
// (name_to_handle_at(2); EOPNOTSUPP otherwise), installs opts.Exports and
// registers NFS v3 and MOUNT v3 on a new sunrpc.Server. Each New picks a
// new random WRITE verifier (RFC 1813 section 3.3.7).
func New(opts Options) (*Server, error) {
	fd, err := unix.Open(opts.Root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("nfs server: root %q: %w", opts.Root, err)
	}
	if _, _, err := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nfs server: root %q: file handles unsupported (name_to_handle_at): %w", opts.Root, err)
	}
	key := opts.HandleKey
	if len(key) == 0 {
		if key, err = defaultHandleKey(fd); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("nfs server: root %q: %w", opts.Root, err)
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(logr.ToSlogHandler(klog.Background()))
	}
	if opts.TLSRequired && opts.TLS == nil {
		unix.Close(fd)
		return nil, errors.New("nfs server: RPC-with-TLS required without a TLS configuration")
	}
	s := &Server{root: opts.Root, rootFD: fd, rpc: sunrpc.NewServer(log), log: log, seal: newSealer(key), rmap: newReadMap(opts.ReadMapBytes), files: newFileCache(),
		tls: opts.TLS, nameOnly: opts.TLSRequired, refusals: newRefusalLog(),
		euid: uint32(unix.Geteuid()), egid: uint32(unix.Getegid())}
	rand.Read(s.wverf[:])
	s.exports.Store(&exportTable{byID: map[uint32]*export{}})
	if opts.Volumes != nil {
		if err := opts.Volumes.Attach(s); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	if err := s.SetExports(opts.Exports); err != nil {
		unix.Close(fd)
		return nil, err
	}
	s.drc = newReplyCache(drcConfig{MaxEntries: opts.DRCEntries, Expiry: opts.DRCExpiry})
	s.rpc.Register(nfs3.Program, nfs3.Version, s.nfsHandlersWith(s.drc))
	s.rpc.Register(mount3.Program, mount3.Version, s.mountHandlers())
	lo := opts.Locks
	lo.FileKey = s.lockKey
	if lo.Logger == nil {
		lo.Logger = log
	}
	if s.locks, err = lockd.New(lo); err != nil {
		unix.Close(fd)
		return nil, err
	}
	s.rpc.Register(nlm.Program, nlm.Version, s.locks.NLMHandlers())
	s.rpc.Register(nsm.Program, nsm.Version, s.locks.NSMHandlers())
	return s, nil
}

// SetExports replaces the static exports (those not of Options.Volumes)
// atomically: calls in progress finish under the old table, later calls
// see the new one. Every path must name a directory beneath Root reached
// without symbolic links, and none may overlap a volume export; on error
// the table is unchanged. A handle of a removed export becomes
// NFS3ERR_BADHANDLE (its export id is unknown).
func (s *Server) SetExports(exps []Export) error {
	cp := make([]Export, len(exps))
	for i, e := range exps {
		e.Clients = slices.Clone(e.Clients)
		e.ReadOnlyClients = slices.Clone(e.ReadOnlyClients)
		cp[i] = e
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	list, err := resolveExports(s.rootFD, s.seal, cp)
	if err != nil {
		return err
	}
	for _, e := range list {
		if err := overlap(e, s.volPaths); err != nil {
			return err
		}
	}
	old := s.static
	s.static = list
	if err := s.rebuildLocked(); err != nil {
		s.static = old
		return err
	}
	klog.V(2).InfoS("nfs server: exports set", "count", len(list))
	return nil
}

// Exports returns a copy of the static exports (those set by Options and
// SetExports; not the volume exports).
func (s *Server) Exports() []Export {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	out := make([]Export, len(s.static))
	for i, e := range s.static {
		out[i] = e.Export
		out[i].Clients = slices.Clone(e.Clients)
		out[i].ReadOnlyClients = slices.Clone(e.ReadOnlyClients)
	}
	return out
}

// rebuildLocked installs a new export table made of the static exports
// and the volume exports. s.tmu is held.
func (s *Server) rebuildLocked() error {
	t, err := newTable(slices.Concat(s.static, s.vols))
	if err != nil {
		return err
	}
	s.exports.Store(t)
	return nil
}

// DRCStats returns the duplicate request cache's counters (drc.go).
func (s *Server) DRCStats() DRCStats { return s.drc.Stats() }

// ReadMapStats returns the counters of READ's file mappings (bytes mapped
// and their bound, hits, misses, evictions, copies, faults).
func (s *Server) ReadMapStats() ReadMapStats { return s.rmap.stats() }

// FileCacheStats returns the counters of the files READ and WRITE keep
// open (files open, hits, misses, evictions).
func (s *Server) FileCacheStats() FileCacheStats { return s.files.stats() }

// Locks returns the NLM/NSM lock manager.
func (s *Server) Locks() *lockd.Manager { return s.locks }

// Logger returns the logger of the RPC layer (Options.Logger, or klog's),
// for the transports handed to the server.
func (s *Server) Logger() *slog.Logger { return s.log }

// Dispatcher returns the RPC dispatcher serving NFS v3, MOUNT v3, NLM v4 and NSM v1,
// for any transport (sunrpc.ServeTCP, RPC-over-RDMA).
func (s *Server) Dispatcher() *sunrpc.Server { return s.rpc }

// WriteVerf returns this instance's WRITE/COMMIT verifier.
func (s *Server) WriteVerf() nfs3.WriteVerf { return s.wverf }

// Serve serves NFS on nfsL and MOUNT on mountL (either may be nil) over
// TCP until ctx ends, then closes the listeners and returns nil, or the
// first accept error. The listeners are opened by the caller (package
// exportd for driver server).
func (s *Server) Serve(ctx context.Context, nfsL, mountL net.Listener) error {
	return s.serveTCP(ctx, s.tcpOptions(s.nameOnly), nfsL, mountL)
}

// tcpOptions returns the TCP options of a listener: RPC-with-TLS offered
// with Options.TLS, required with client certificates when required.
func (s *Server) tcpOptions(required bool) sunrpc.TCPOptions {
	o := sunrpc.TCPOptions{MaxRecordSize: MaxIO + 64<<10, Logger: s.log, TLS: s.tls}
	if required {
		o.XprtSec = sunrpc.XprtSecMTLS
	}
	return o
}

// ServeLocks serves NLM v4 on nlmL and NSM v1 on nsmL (either may be nil)
// over TCP until ctx ends, like Serve. The first call also starts the
// lock manager's reboot notifications (SM_NOTIFY to the clients recorded
// before a restart).
func (s *Server) ServeLocks(ctx context.Context, nlmL, nsmL net.Listener) error {
	s.locksOnce.Do(s.locks.Start)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		err := s.serveTCP(ctx, s.tcpOptions(false), nsmL)
		if err != nil {
			cancel()
		}
		errc <- err
	}()
	err := s.serveTCP(ctx, s.tcpOptions(s.nameOnly), nlmL)
	if err != nil {
		cancel()
	}
	return errors.Join(err, <-errc)
}

func (s *Server) serveTCP(ctx context.Context, opts sunrpc.TCPOptions, ls ...net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(ls))
	n := 0
	for _, l := range ls {
		if l == nil {
			continue
		}
		n++
		go func() {
			err := sunrpc.ServeTCP(ctx, l, s.rpc, opts)
			if err != nil {
				cancel()
			}
			errc <- err
		}()
	}
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close stops the lock manager and releases the root descriptor. Call it
// after serving has stopped (and before closing Options.Volumes).
func (s *Server) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.locks.Close()
	s.rmap.close()
	s.files.close()
	return unix.Close(s.rootFD)
}

// garbage makes an argument decoding error GARBAGE_ARGS (RFC 5531 section 9).
func garbage(err error) error {
	if errors.Is(err, sunrpc.ErrGarbageArgs) {
		return err
	}
	return fmt.Errorf("%w: %w", sunrpc.ErrGarbageArgs, err)
}
