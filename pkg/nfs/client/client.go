package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// replyHeaderMax is the largest accepted RPC reply header before the
// results (RFC 5531 section 9): xid, mtype, reply_stat, a verifier of at
// most MaxAuthBytes, accept_stat.
const replyHeaderMax = 4 + 4 + 4 + 8 + sunrpc.MaxAuthBytes + 4

// Client is a mounted NFSv3 export. It is safe for concurrent use.
type Client struct {
	nfs   *connSet       // the NFS connections (Options.NConnect)
	mnt   *sunrpc.Client // nil when built with New
	opts  Options
	root  nfs3.FH
	info  nfs3.FsinfoRes
	rsize int
	wsize int
	dsize int // READDIRPLUS maxcount

	locks *Locker // NLM client (lock.go)

	verfChanges atomic.Uint64 // COMMITs that found a write verifier changed
	resentBytes atomic.Uint64 // bytes re-sent after a verifier change

	closeOnce sync.Once
	closeErr  error
}

// Mount mounts opts.Export: it resolves the MOUNT (and, for the default
// TCP transport, the NFS) port through rpcbind when 0, calls MNT over TCP
// (RFC 1813 section 5.2.1, RFC 8267 section 5.1), checks that the export
// accepts AUTH_SYS or AUTH_NONE, then calls FSINFO (RFC 1813 section
// 3.3.19) on the root handle and sets rsize = min(rtmax, opts.RSize,
// MaxIOSize) and wsize = min(wtmax, opts.WSize, MaxIOSize) in bytes.
//
// Errors wrap ErrNotRegistered, ErrMountFailed and the mount3.Status (e.g.
// mount3.ErrAcces for a refused client), ErrNoAuthSys, an nfs3.Status from
// FSINFO, or RPC and dial errors; ctx bounds the whole mount.
func Mount(ctx context.Context, opts Options) (*Client, error) {
	if opts.RPCBindPort == 0 {
		opts.RPCBindPort = PortmapPort
	}
	cred := opts.AuthSys
	copts := sunrpc.ClientOptions{AuthSys: &cred, Retry: opts.Retry}
	if opts.MountPort == 0 {
		p, err := GetPort(ctx, hostPort(opts.Server, opts.RPCBindPort), mount3.Program, mount3.Version, opts.plainTCP())
		if err != nil {
			return nil, err
		}
		opts.MountPort = p
	}
	maddr := hostPort(opts.Server, opts.MountPort)
	mnt, mres, err := callMnt(ctx, maddr, opts.Export, opts.tcpFor(mount3.Program, mount3.Version), copts)
	if errors.Is(err, sunrpc.ErrTLSRefused) && opts.TCP.XprtSec != sunrpc.XprtSecNone {
		// a MOUNT server that does not do RPC-with-TLS (Linux's
		// rpc.mountd): MNT in plaintext, as Linux's client always sends
		// it; the NFS connections stay under the mount's policy
		klog.InfoS(LogMountPlaintext, "server", maddr, "export", opts.Export, "xprtsec", opts.TCP.XprtSec.String())
		if mnt != nil {
			mnt.Close()
		}
		mnt, mres, err = callMnt(ctx, maddr, opts.Export, opts.plainTCP(), copts)
	}
	if mnt == nil {
		return nil, err
	}
	if err == nil && mres.Status != mount3.OK {
		err = fmt.Errorf("%w: %w", ErrMountFailed, mres.Status)
	}
	if err == nil && len(mres.AuthFlavors) > 0 &&
		!slices.Contains(mres.AuthFlavors, uint32(sunrpc.AuthSys)) && !slices.Contains(mres.AuthFlavors, uint32(sunrpc.AuthNone)) {
		err = fmt.Errorf("%w: server offers flavors %v", ErrNoAuthSys, mres.AuthFlavors)
	}
	if err != nil {
		mnt.Close()
		return nil, fmt.Errorf("nfs client: mount %s:%s: %w", opts.Server, opts.Export, err)
	}

	dial := opts.Dial
	if dial == nil {
		if opts.NFSPort == 0 {
			p, err := GetPort(ctx, hostPort(opts.Server, opts.RPCBindPort), nfs3.Program, nfs3.Version, opts.plainTCP())
			if err != nil {
				umount(mnt, opts.Export)
				return nil, err
			}
			opts.NFSPort = p
		}
		dial = sunrpc.TCPDialer(hostPort(opts.Server, opts.NFSPort), opts.tcpFor(nfs3.Program, nfs3.Version))
		opts.Transport = "tcp"
	}
	if opts.WrapDial != nil {
		dial = opts.WrapDial(dial)
	}
	nc, err := newConnSet(opts.NConnect, dial, copts)
	if err != nil {
		umount(mnt, opts.Export)
		return nil, err
	}
	c, err := newClient(ctx, nc, mres.FH, opts)
	if err != nil {
		nc.close()
		umount(mnt, opts.Export)
		return nil, fmt.Errorf("nfs client: mount %s:%s: %w", opts.Server, opts.Export, err)
	}
	c.mnt = mnt
	klog.V(1).InfoS("NFSv3 mounted", "server", opts.Server, "export", opts.Export, "transport", opts.Transport,
		"mountPort", opts.MountPort, "nfsPort", opts.NFSPort, "nconnect", len(nc.conns), "root", mres.FH.String())
	return c, nil
}

// LogMountPlaintext is the message of the log line a mount with
// xprtsec=tls or mtls writes when its MOUNT server refused RPC-with-TLS and
// MNT went in plaintext.
const LogMountPlaintext = "nfs client: the MOUNT server does not do RPC-with-TLS: MNT in plaintext, as Linux sends it; NFS stays under the mount's xprtsec"

// callMnt calls MNT for export over TCP to addr with the TCP options tcp; it
// returns the MOUNT client (also on error, to be closed) and the reply.
func callMnt(ctx context.Context, addr, export string, tcp sunrpc.TCPOptions, copts sunrpc.ClientOptions) (*sunrpc.Client, mount3.MntRes, error) {
	var mres mount3.MntRes
	c, err := sunrpc.NewClient(sunrpc.TCPDialer(addr, tcp), copts)
	if err != nil {
		return nil, mres, err
	}
	err = c.Call(ctx, sunrpc.CallSpec{
		Prog: mount3.Program, Vers: mount3.Version, Proc: mount3.ProcMnt,
		Args:         func(b *sunrpc.Builder) { (&mount3.MntArgs{Path: export}).Encode(&b.Encoder) },
		Results:      func(d *xdr.Decoder, _ int) error { return mres.Decode(d) },
		MaxReplySize: replyHeaderMax + 4 + 4 + mount3.FHSize + 4 + 4*64,
	})
	return c, mres, err
}

// New returns a Client for an already known root handle over an existing
// sunrpc.Client (which must carry the caller's credential): no MOUNT, and
// Unmount only closes rpc. It calls FSINFO like Mount. Tests and callers
// with their own MOUNT logic use it.
func New(ctx context.Context, rpc *sunrpc.Client, root nfs3.FH, opts Options) (*Client, error) {
	return newClient(ctx, singleConnSet(rpc), root, opts)
}

func newClient(ctx context.Context, nc *connSet, root nfs3.FH, opts Options) (*Client, error) {
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.MaxUncommitted <= 0 {
		opts.MaxUncommitted = DefaultMaxUncommitted
	}
	if opts.JukeboxDelay <= 0 {
		opts.JukeboxDelay = DefaultJukeboxDelay
	}
	if opts.Transport == "" {
		opts.Transport = "custom"
	}
	c := &Client{nfs: nc, opts: opts, root: root}
	c.locks = NewLocker(opts)
	info, err := c.Fsinfo(ctx, root)
	if err != nil {
		return nil, err
	}
	c.info = info
	c.rsize = ioSize(info.RTMax, opts.RSize)
	c.wsize = ioSize(info.WTMax, opts.WSize)
	c.dsize = DefaultDirCount
	if info.DTPref >= 1024 {
		c.dsize = int(min(info.DTPref, MaxIOSize))
	}
	klog.V(1).InfoS("NFSv3 sizes negotiated", "transport", opts.Transport,
		"rsize", c.rsize, "wsize", c.wsize, "readdirCount", c.dsize,
		"rtmax", info.RTMax, "rtpref", info.RTPref, "wtmax", info.WTMax, "wtpref", info.WTPref,
		"dtpref", info.DTPref, "maxFileSize", info.MaxFileSize, "window", opts.Window)
	return c, nil
}

// ioSize is min(server max, option, MaxIOSize) in bytes, rounded down to
// whole 4 KiB pages when at least one page; a server max of 0 means no
// limit from the server.
func ioSize(srvMax uint32, opt int) int {
	n := MaxIOSize
	if srvMax > 0 && int(srvMax) < n {
		n = int(srvMax)
	}
	if opt > 0 && opt < n {
		n = opt
	}
	if n >= 4096 {
		n &^= 4095 // whole pages, as Linux (nfs_io_size)
	}
	return n
}

// Root returns the handle of the mounted export's root directory.
func (c *Client) Root() nfs3.FH { return c.root }

// RSize returns the largest READ count used, in bytes.
func (c *Client) RSize() int { return c.rsize }

// WSize returns the largest WRITE count used, in bytes.
func (c *Client) WSize() int { return c.wsize }

// FsinfoAtMount returns the FSINFO result read at mount time.
func (c *Client) FsinfoAtMount() nfs3.FsinfoRes { return c.info }

// Stats returns the RPC counters of the NFS connections, summed.
func (c *Client) Stats() sunrpc.ClientStats { return c.nfs.stats() }

// ConnStats returns the RPC counters of each NFS connection
// (Options.NConnect of them, in a fixed order).
func (c *Client) ConnStats() []sunrpc.ClientStats {
	out := make([]sunrpc.ClientStats, len(c.nfs.conns))
	for i, cn := range c.nfs.conns {
		out[i] = cn.rpc.Stats()
	}
	return out
}

// WriteStats are counters of the UNSTABLE write path of a Client (all its
// Files) since Mount or New.
type WriteStats struct {
	// VerifierChanges counts the COMMITs whose write verifier differed
	// from that of at least one UNSTABLE WRITE reply they were to cover:
	// the server restarted and may have lost that data (RFC 1813 section
	// 3.3.7, writeverf3).
	VerifierChanges uint64
	// ResentBytes counts the bytes re-sent with FILE_SYNC after such a
	// change.
	ResentBytes uint64
}

// WriteStats returns the write-path counters (see WriteStats).
func (c *Client) WriteStats() WriteStats {
	return WriteStats{VerifierChanges: c.verfChanges.Load(), ResentBytes: c.resentBytes.Load()}
}

// Unmount releases the locks held through Locks, calls UMNT (RFC 1813
// section 5.2.3) for the export, bounded by ctx, and closes the
// connections. The first error, if any, is returned; the connections are
// closed anyway. A Client from New only releases its locks and closes.
func (c *Client) Unmount(ctx context.Context) error {
	err := c.locks.Close(ctx)
	if c.mnt != nil {
		if uerr := c.mnt.Call(ctx, sunrpc.CallSpec{
			Prog: mount3.Program, Vers: mount3.Version, Proc: mount3.ProcUmnt,
			Args:         func(b *sunrpc.Builder) { (&mount3.UmntArgs{Path: c.opts.Export}).Encode(&b.Encoder) },
			MaxReplySize: replyHeaderMax,
		}); uerr != nil {
			err = errors.Join(err, fmt.Errorf("nfs client: UMNT %s: %w", c.opts.Export, uerr))
		}
	}
	return errors.Join(err, c.Close())
}

// Close closes the connections without UMNT.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.nfs.close()
		if c.mnt != nil {
			c.mnt.Close()
		}
	})
	return c.closeErr
}

func umount(mnt *sunrpc.Client, export string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = mnt.Call(ctx, sunrpc.CallSpec{
		Prog: mount3.Program, Vers: mount3.Version, Proc: mount3.ProcUmnt,
		Args: func(b *sunrpc.Builder) { (&mount3.UmntArgs{Path: export}).Encode(&b.Encoder) },
	})
	mnt.Close()
}

// unboundedReply tells whether proc's reply is seldom near its bound
// (READDIR and READDIRPLUS replies up to the count asked, READLINK): over
// RPC-over-RDMA with responder-provided Read chunks such a call offers no
// Reply chunk (sunrpc.Call.UnboundedReply).
func unboundedReply(proc uint32) bool {
	return proc == nfs3.ProcReaddir || proc == nfs3.ProcReaddirplus || proc == nfs3.ProcReadlink
}

// call makes one NFSv3 call. args encodes the arguments (it may mark a
// payload); results decodes the union (status included) and returns the
// nfs3 status it read. An NFS error status is returned wrapped with the
// procedure name; JUKEBOX is retried after the delay until ctx ends.
func (c *Client) call(ctx context.Context, proc uint32, maxRes int, replyPayload []byte,
	args func(b *sunrpc.Builder), results func(d *xdr.Decoder, placed int) (nfs3.Status, error)) error {
	return c.callTake(ctx, proc, maxRes, replyPayload, nil, args, results)
}

// callTake is call whose DDP-eligible result the transport may leave in
// its receive buffers (sunrpc.CallSpec.TakePlaced): take gets them, and
// the release of the reply, when the call succeeded with NFS3_OK.
func (c *Client) callTake(ctx context.Context, proc uint32, maxRes int, replyPayload []byte, take func(vec [][]byte, release func()),
	args func(b *sunrpc.Builder), results func(d *xdr.Decoder, placed int) (nfs3.Status, error)) error {
	var locate func([]byte) int
	if replyPayload != nil {
		locate = nfs3.LocateDDPResult(proc)
	}
	for {
		var st nfs3.Status
		var kept [][]byte
		var release func()
		var takePlaced func([][]byte, func())
		if take != nil {
			takePlaced = func(vec [][]byte, rel func()) { kept, release = vec, rel }
		}
		err := c.nfs.pick().Call(ctx, sunrpc.CallSpec{
			Prog: nfs3.Program, Vers: nfs3.Version, Proc: proc,
			Args: args,
			Results: func(d *xdr.Decoder, placed int) error {
				var err error
				st, err = results(d, placed)
				return err
			},
			ReplyPayload:       replyPayload,
			LocateReplyPayload: locate,
			MaxReplySize:       replyHeaderMax + maxRes,
			UnboundedReply:     unboundedReply(proc),
			TakePlaced:         takePlaced,
			Cred:               credOf(ctx),
		})
		if release != nil && (err != nil || st != nfs3.OK) {
			release()
		}
		if err != nil {
			return fmt.Errorf("nfs3 %s: %w", nfs3.ProcName(proc), err)
		}
		if st == nfs3.OK {
			if release != nil {
				take(kept, release)
			}
			return nil
		}
		if st == nfs3.ErrJukebox {
			klog.V(2).InfoS("NFS3ERR_JUKEBOX, retrying", "proc", nfs3.ProcName(proc), "delay", c.opts.JukeboxDelay)
			t := time.NewTimer(c.opts.JukeboxDelay)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("nfs3 %s: %w (after %w)", nfs3.ProcName(proc), ctx.Err(), st)
			}
		}
		return fmt.Errorf("nfs3 %s: %w", nfs3.ProcName(proc), st)
	}
}

// simple makes a call whose arguments and results have no DDP-eligible item.
func (c *Client) simple(ctx context.Context, proc uint32, args, res nfs3.Message, status func() nfs3.Status) error {
	return c.call(ctx, proc, nfs3.MaxResultSize(proc, args), nil,
		func(b *sunrpc.Builder) { args.Encode(&b.Encoder) },
		func(d *xdr.Decoder, _ int) (nfs3.Status, error) {
			err := res.Decode(d)
			return status(), err
		})
}
