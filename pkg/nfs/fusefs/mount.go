package fusefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/fuseuring"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// MaxWrite is the largest FUSE WRITE (and READ) request, 1 MiB, the
// largest NFS rsize/wsize of this client.
const MaxWrite = client.MaxIOSize

// Config says what Mount mounts and how.
type Config struct {
	// Source is "SERVER:/EXPORT" (an IPv6 server in brackets).
	Source string
	// Options are the parsed -o options.
	Options mountopts.Options
	// AuthSys is the credential of every NFS and MOUNT call; the zero
	// value means uid 0, gid 0 and the host name. The server checks
	// permissions against it, whoever the local caller is.
	AuthSys sunrpc.AuthSysParams
	// Debug logs every FUSE request (go-fuse debug output).
	Debug bool
	// WrapDial wraps the NFS client's dialer (client.Options.WrapDial).
	WrapDial func(sunrpc.DialFunc) sunrpc.DialFunc
	// Dial dials the NFS service (client.Options.Dial), as package
	// nfs/transport builds it from Options: required for proto=rdma; nil
	// for proto=tcp dials TCP.
	Dial sunrpc.DialFunc
	// Transport names Dial's transport in logs (client.Options.Transport,
	// e.g. "rdma/siw").
	Transport string
	// TCP configures the client's TCP connections, RPC-with-TLS included
	// (client.Options.TCP; transport.TCPForMount builds it).
	TCP sunrpc.TCPOptions
	// FD, when positive, is an open /dev/fuse file descriptor that a
	// privileged process already mounted on the mount point (mount(2)
	// with "fd=FD", the libfuse /dev/fd/N convention): Serve answers the
	// kernel's INIT on it instead of mounting, so the server needs no
	// privilege and the mount may outlive whoever mounted it (the CSI node
	// plugin hands the fd to a mounter process). The directory passed to
	// Serve is then only the real mount point, for logs and Unmount.
	FD int
	// LockCallerName is the caller_name of the mount's NLM locks, the
	// name the server's NSM knows this host by; "" means the host name.
	// Mounts of one node (one per pod) should all use the node's name.
	LockCallerName string
	// StateDir, if not "", keeps the host's NSM state (client.HostState):
	// after a reboot of the node the servers it held locks on are told
	// (SM_NOTIFY) so that they free them. Mounts of one node share it.
	StateDir string
	// Version is the version of this binary, for the logs and metrics of
	// a handover (handover.go).
	Version string
	// MapFile, if not "", is the state map this mount keeps of the
	// kernel's nodeids and handles (statemap.go), for a process that
	// takes the connection up after this one dies (Recover). It belongs
	// outside the process: the mounter's state directory.
	MapFile string
}

// ClientOptions builds the NFS client options for cfg: ports, sizes, the
// retry policy (hard/soft, timeo, retrans), the lock options and the
// dialer cfg.Dial (MOUNT stays TCP). Errors wrap mountopts.ErrBadOption
// (a bad source; proto=rdma without cfg.Dial), or are those of opening
// the host's NSM state.
func ClientOptions(cfg Config) (client.Options, error) {
	server, export, err := mountopts.SplitSource(cfg.Source)
	if err != nil {
		return client.Options{}, err
	}
	o := cfg.Options
	cred := cfg.AuthSys
	if cred.MachineName == "" {
		cred.MachineName, _ = os.Hostname()
	}
	co := client.Options{
		Server: server, Export: export, MountPort: o.MountPort, NFSPort: o.NFSPort(),
		AuthSys: cred, RSize: o.RSize, WSize: o.WSize,
		MaxUncommitted: FileUncommittedBytes,
		Retry:          sunrpc.RetryPolicy{Soft: o.Soft, Retries: o.Retrans, Timeout: o.Timeo},
		WrapDial:       cfg.WrapDial,
		NConnect:       o.NConnect,
		Lock:           client.LockOptions{Port: o.LockPort, CallerName: cfg.LockCallerName},
	}
	if cfg.StateDir != "" && !(o.LocalFlock() && o.LocalPosix()) {
		name := cfg.LockCallerName
		if name == "" {
			name, _ = os.Hostname()
		}
		hs, err := client.OpenHostState(cfg.StateDir, name, client.NotifyOptions{})
		if err != nil {
			return client.Options{}, err
		}
		co.Lock.State = hs
	}
	if o.Proto == mountopts.ProtoRDMA && cfg.Dial == nil {
		return client.Options{}, fmt.Errorf("%w: proto=rdma needs an RPC-over-RDMA dialer (Config.Dial)", mountopts.ErrBadOption)
	}
	co.Dial, co.Transport, co.TCP = cfg.Dial, cfg.Transport, cfg.TCP
	return co, nil
}

// nameMax returns the longest name the server takes in the export: its
// PATHCONF name_max (RFC 1813 section 3.3.20), at most nfs3.MaxNameLen;
// nfs3.MaxNameLen if PATHCONF fails or answers 0.
func nameMax(ctx context.Context, c *client.Client) int {
	res, err := c.Pathconf(ctx, c.Root())
	if err != nil || res.NameMax == 0 || res.NameMax > nfs3.MaxNameLen {
		if err != nil {
			klog.V(2).InfoS("fusefs: PATHCONF failed, name_max 255", "err", err)
		}
		return nfs3.MaxNameLen
	}
	return int(res.NameMax)
}

// fuseServer serves the FUSE connection of a mount: go-fuse's
// *fuse.Server over /dev/fuse, or *fuseuring.Server.
type fuseServer interface {
	Wait()
	Unmount() error
}

// Mount is a mounted file system.
type Mount struct {
	Client *client.Client
	sys    *fsys
	server fuseServer
	ring   *fuseuring.Server // nil when go-fuse's server reads /dev/fuse
	dir    string
	cancel context.CancelFunc
	byFD   bool // mounted by another process (Config.FD): unmount dir ourselves
	cfg    Config
	// init is the kernel's INIT as this mount's server answered it, and
	// devFD returns a duplicate of the connection's /dev/fuse descriptor,
	// for a handover (handover.go); nil when the mount cannot be handed
	// over.
	init  *fuse.InitIn
	devFD func() (int, error)
}

// NewMount mounts the NFS export with the NFS client (bounded by ctx),
// then mounts it with FUSE on dir (as root a direct mount(2), no
// fusermount3 needed), serving requests in the background.
// Errors: mountopts.ErrBadOption, the client's mount errors (client.ErrMountFailed,
// nfs3/mount3 statuses, RPC and dial errors), and mount(2) errors.
func NewMount(ctx context.Context, dir string, cfg Config) (*Mount, error) {
	co, err := ClientOptions(cfg)
	if err != nil {
		return nil, err
	}
	c, err := client.Mount(ctx, co)
	if err != nil {
		return nil, err
	}
	m, err := Serve(ctx, c, dir, cfg)
	if err != nil {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Unmount(uctx)
		return nil, err
	}
	return m, nil
}

// prepare builds the file system of client c for cfg: the nodes' shared
// state, the root node (after a GETATTR of the root, bounded by ctx) and
// go-fuse's options. sys.cancel ends its background work.
func prepare(ctx context.Context, c *client.Client, cfg Config) (*fsys, *node, *fs.Options, error) {
	o := cfg.Options
	rootAttr, err := c.Getattr(ctx, c.Root())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("fusefs: root GETATTR: %w", err)
	}
	bg, cancel := context.WithCancel(context.Background())
	machine := cfg.AuthSys.MachineName
	if machine == "" {
		machine, _ = os.Hostname()
	}
	sys := &fsys{c: c, o: o, blksize: uint32(c.WSize()), nameMax: nameMax(ctx, c), bg: bg, cancel: cancel, budget: newBudget(), callers: newCallers(machine), intr: newInterrupts(InterruptGrace)}
	root := &node{sys: sys, fh: c.Root()}
	sys.root = root
	root.refresh(&rootAttr)
	rs := stableAttr(c.Root(), &rootAttr)
	fsopts := &fs.Options{
		NullPermissions: true, // mode 0 is 0, not 0644
		RootStableAttr:  &rs,
		MountOptions: fuse.MountOptions{
			FsName:       cfg.Source,
			Name:         "nfsrdma",
			AllowOther:   true,
			MaxWrite:     MaxWrite,
			MaxReadAhead: MaxWrite,
			// As root, mount(2) directly and report its error; otherwise
			// fall back to fusermount3 (go-fuse does).
			DirectMount:       true,
			DirectMountStrict: os.Geteuid() == 0,
			// fcntl and flock locks reach us (lock.go), unless all of
			// them are local to the mount: then the kernel keeps them
			EnableLocks: !(o.LocalFlock() && o.LocalPosix()),
			// the kernel checks mode bits (mountopts.KernelOptions) and the
			// server clears set-ID bits (killpriv.go)
			Options:           append([]string(nil), mountopts.KernelOptions...),
			ExtraCapabilities: capHandleKillprivV2,
			// READ replies are bytes in memory, never a file to splice
			DisableSplice: true,
			Debug:         cfg.Debug,
		},
	}
	if o.ReadOnly {
		fsopts.MountOptions.Options = append(fsopts.MountOptions.Options, "ro")
	}
	return sys, root, fsopts, nil
}

// Serve mounts the already mounted client c with FUSE on dir and serves
// it in the background (see NewMount); ctx bounds only the GETATTR of the
// root before mount(2). Unmount or Wait end it; c is unmounted (UMNT)
// then. Errors: the GETATTR's, mount(2)'s.
func Serve(ctx context.Context, c *client.Client, dir string, cfg Config) (*Mount, error) {
	o := cfg.Options
	sys, root, fsopts, err := prepare(ctx, c, cfg)
	if err != nil {
		return nil, err
	}
	cancel := sys.cancel
	mountPoint := dir
	if cfg.FD > 0 {
		mountPoint = "/dev/fd/" + strconv.Itoa(cfg.FD)
		// go-fuse tries a direct mount before the /dev/fd/N convention:
		// it would mount a new file system on /dev/fuse (where
		// /dev/fd/N leads). Never mount here.
		fsopts.MountOptions.DirectMount = false
		fsopts.MountOptions.DirectMountStrict = false
	}
	ring, ringErr := wantRing(o.FuseURing, cfg.FD)
	if ringErr != nil {
		if o.FuseURing == mountopts.FuseURingOn {
			cancel()
			return nil, fmt.Errorf("fusefs: fuse_uring=on: %w", ringErr)
		}
		klog.InfoS("fusefs: FUSE over io_uring unavailable, serving /dev/fuse", "dir", dir, "reason", ringErr.Error())
	}
	var srv fuseServer
	var urs *fuseuring.Server
	if ring {
		urs, err = serveRing(dir, cfg.FD, fsopts, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
			sys.raw = raw
			sys.owners = &lockOwners{RawFileSystem: raw}
			sys.gate = newGate(sys.owners)
			return sys.gate
		}, root, sys.answersAlone, o.FuseURing == mountopts.FuseURingOn)
		srv = urs
	} else {
		// fs.Mount, with the lock owners of FLUSH and RELEASE passed on,
		// behind the gate of a handover
		sys.raw = fs.NewNodeFS(root, fsopts)
		sys.owners = &lockOwners{RawFileSystem: sys.raw}
		sys.gate = newGate(sys.owners)
		var gs *fuse.Server
		gs, err = fuse.NewServer(sys.gate, mountPoint, &fsopts.MountOptions)
		if err == nil {
			go gs.Serve()
			err = gs.WaitMount()
		}
		srv = gs
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("fusefs: mount %s: %w", dir, err)
	}
	go sys.intr.watch(sys.bg)
	if o.ReadAheadKB > 0 {
		// not fatal: the mount works with the kernel's 128 KiB, slower
		if err := SetReadAhead(dir, o.ReadAheadKB); err != nil {
			klog.ErrorS(err, "fusefs: read-ahead left at the kernel's default", "dir", dir, "read_ahead_kb", o.ReadAheadKB)
		}
	}
	transport := fuseuring.TransportDevFUSE
	if urs != nil {
		transport = urs.Stats().Transport
	}
	klog.InfoS("fusefs: mounted", "source", cfg.Source, "dir", dir, "proto", o.Proto, "fuse_transport", transport,
		"rsize", c.RSize(), "wsize", c.WSize(), "noac", o.NoAC, "read_ahead_kb", o.ReadAheadKB,
		"local_lock", o.LocalLock, "lockport", o.LockPort)
	m := &Mount{Client: c, sys: sys, server: srv, ring: urs, dir: dir, cancel: cancel, byFD: cfg.FD > 0, cfg: cfg}
	if gs, ok := srv.(*fuse.Server); ok {
		init := *gs.KernelSettings()
		m.init = &init
		m.devFD = func() (int, error) { return goFuseFD(gs) }
		if cfg.MapFile != "" {
			if err := startStateMap(sys, cfg.MapFile, m.init, nil); err != nil {
				klog.ErrorS(err, "fusefs: no state map: a restarted mount process could not take this mount up", "dir", dir)
			}
		}
	}
	return m, nil
}

// wantRing says whether a mount with fuse_uring=mode serves FUSE over
// io_uring: never with off; with auto and on where the kernel offers it
// (fuseuring.Available) and this process can mount (root) or was handed
// a mounted fd. The error says why not (auto logs it, on fails).
func wantRing(mode string, fd int) (bool, error) {
	if mode != mountopts.FuseURingAuto && mode != mountopts.FuseURingOn {
		return false, nil
	}
	if err := fuseuring.Available(); err != nil {
		return false, err
	}
	if fd <= 0 && os.Geteuid() != 0 {
		return false, fmt.Errorf("%w: mounting /dev/fuse needs root", fuseuring.ErrUnavailable)
	}
	return true, nil
}

// serveRing mounts dir (unless fd is a mounted /dev/fuse already) and
// serves it with a fuseuring.Server over the node tree of root, whose raw
// file system wrap wraps; inline is its fuseuring.Config.Inline. With
// required, a ring that does not come up fails the mount (aborted and
// unmounted); otherwise the server stays on /dev/fuse, logged.
func serveRing(dir string, fd int, fsopts *fs.Options, wrap func(fuse.RawFileSystem) fuse.RawFileSystem, root fs.InodeEmbedder, inline func(uint32) bool, required bool) (*fuseuring.Server, error) {
	if fd <= 0 {
		var err error
		if fd, err = fuseuring.Mount(dir, &fsopts.MountOptions); err != nil {
			return nil, err
		}
	}
	rs := fuseuring.NewServer(fd, dir, &fsopts.MountOptions, fuseuring.Config{Ring: true, Inline: inline})
	o := *fsopts
	o.ServerCallbacks = rs
	fail := func(err error) (*fuseuring.Server, error) {
		_ = fuseuring.Abort(dir)
		_ = syscallUnmount(dir, mntDetach)
		return nil, err
	}
	if err := rs.Start(wrap(fs.NewNodeFS(root, &o))); err != nil {
		return fail(err)
	}
	if err := rs.RingError(); err != nil {
		if required {
			return fail(fmt.Errorf("fuse_uring=on: %w", err))
		}
		klog.InfoS("fusefs: FUSE over io_uring did not come up, serving /dev/fuse", "dir", dir, "reason", err.Error())
	}
	return rs, nil
}

// answersAlone reports whether the file system answers a FUSE request of
// opcode, coming now, without waiting for another request of the mount
// (fuseuring.Config.Inline): all but SETLKW, and UNLINK, RENAME and
// RENAME2 while a file of the mount is open: those wait for the RELEASE
// of a file just closed (awaitRelease), which may come through the same
// ring queue. With no file open (rm -rf of a tree, a create then an
// unlink of many files) they are answered on the queue's thread too; one
// that meets a file opened and closed since does not wait there
// (awaitRelease, fuseuring.OnQueueThread). Handing UNLINK to a goroutine
// and back cost as much as the NFS REMOVE itself: unlinks over the ring
// took 2.4 times as long as over /dev/fuse (BenchmarkFUSEMetadata,
// tcp-uring).
func (sys *fsys) answersAlone(opcode uint32) bool {
	switch opcode {
	case 33: // FUSE_SETLKW
		return false
	case 10, 12, 45: // FUSE_UNLINK, FUSE_RENAME, FUSE_RENAME2
		return sys.opens.Load() <= 0
	}
	return true
}

// FUSETransport says how the mount gets the kernel's requests
// (fuseuring.TransportIOURing or TransportDevFUSE) and, over io_uring,
// how many it answered over the ring and over /dev/fuse.
func (m *Mount) FUSETransport() fuseuring.Stats {
	if m.ring == nil {
		return fuseuring.Stats{Transport: fuseuring.TransportDevFUSE}
	}
	return m.ring.Stats()
}

// Abort aborts the mount's FUSE connection (fusectl): every request in
// flight or to come fails with ENOTCONN and the server stops. For a hung
// mount that unmount cannot end.
func (m *Mount) Abort() error {
	return fuseuring.Abort(m.dir)
}

// Wait blocks until the file system is unmounted (by Unmount, umount(8)
// or fusermount3 -u), then cancels background writes, releases the NLM
// locks still held and unmounts the NFS export (UMNT; at most 5 s in
// all). It returns the first error, if any.
func (m *Mount) Wait() error {
	m.server.Wait()
	m.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.Client.Unmount(ctx)
	klog.InfoS("fusefs: unmounted", "dir", m.dir)
	return err
}

// Unmount unmounts the FUSE file system: umount(2), retried for up to
// timeout while the mount is busy (EBUSY), then a lazy unmount
// (MNT_DETACH). Wait still has to be called.
func (m *Mount) Unmount(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var err error
		if m.byFD {
			err = syscallUnmount(m.dir, 0)
		} else {
			err = m.server.Unmount()
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			klog.InfoS("fusefs: unmount failed, detaching lazily", "dir", m.dir, "err", err)
			if derr := syscallUnmount(m.dir, mntDetach); derr != nil {
				if aerr := m.Abort(); aerr != nil {
					return errors.Join(err, derr, aerr)
				}
				return errors.Join(err, derr)
			}
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}
