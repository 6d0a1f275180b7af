// Package mountopts parses and checks the options of an NFSv3 mount in
// nfs(5) vocabulary ("proto=rdma,port=20049,ro,actimeo=0"), and the
// mount source "SERVER:/EXPORT". It is shared by the CSI node plugin,
// which validates a volume's options before it mounts, and the FUSE
// file system that serves the mount.
package mountopts

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// ErrBadOption is wrapped by every Parse and SplitSource error: an unknown option,
// a missing or malformed value, or a value out of range.
var ErrBadOption = errors.New("bad mount option")

// Transport protocols of the NFS service (nfs(5) "proto").
const (
	ProtoTCP  = "tcp"
	ProtoRDMA = "rdma"
)

// Default ports and limits.
const (
	// DefaultRDMAPort is the NFS/RDMA port used when proto=rdma and no
	// port (or port=0) is given, as nfs(5) (RFC 8267 section 4.2).
	DefaultRDMAPort = nfs3.RDMAPort
	// MaxCredits bounds credits=N (RPC-over-RDMA calls outstanding).
	MaxCredits = 1024
	// DefaultReadAheadKB is the kernel read-ahead of a mount, in KiB
	// (read_ahead_kb=N): 4 MiB, four READs of the largest rsize in flight
	// per sequential reader. The kernel's own default for FUSE is 128 KiB,
	// one 128 KiB READ at a time.
	DefaultReadAheadKB = 4096
	// MaxReadAheadKB bounds read_ahead_kb=N: 64 MiB.
	MaxReadAheadKB = 64 << 10
	// MaxNConnect bounds nconnect=N: 16, as Linux (NFS_MAX_CONNECTIONS).
	MaxNConnect = 16
)

// Options are the options of `driver mount -o`, in nfs(5) vocabulary.
// The zero value is not meant to be used: start from Default (Parse
// does).
type Options struct {
	// Proto is ProtoTCP or ProtoRDMA (transport of NFS; MOUNT is always TCP).
	Proto string
	// Port is the NFS port; 0 means rpcbind for TCP, DefaultRDMAPort for RDMA.
	Port int
	// MountPort is the MOUNT v3 port over TCP; 0 asks rpcbind.
	MountPort int
	// Vers is the NFS version; only 3.
	Vers int
	// RSize and WSize cap READ and WRITE sizes in bytes; 0: the server's.
	RSize, WSize int
	// Soft makes RPCs give up after Retrans retransmissions (EIO); hard
	// (false) retries until the operation is interrupted.
	Soft bool
	// Timeo is the RPC retransmission timeout (nfs(5) timeo, given in
	// deciseconds); 0 waits for the connection to fail.
	Timeo time.Duration
	// Retrans is the retransmissions before a soft mount fails.
	Retrans int
	// NoAC disables attribute caching: every attribute and entry timeout
	// is 0 and writes are not delayed (write-through, as Linux's noac).
	NoAC bool
	// ACRegMin..ACDirMax bound the attribute cache timeouts of regular
	// files and directories (nfs(5), given in seconds).
	ACRegMin, ACRegMax, ACDirMin, ACDirMax time.Duration
	// ReadOnly mounts read-only (ro); rw is the default.
	ReadOnly bool
	// Credits is the RPC-over-RDMA credits the client asks for (ours,
	// proto=rdma only); 0: the rpcrdma default (32).
	Credits int
	// RDMAVers (ours: rdmavers=1|2, proto=rdma only) is the highest
	// RPC-over-RDMA version the client speaks: 2 (0, the default) opens
	// with version 2 and falls back to version 1 when the server answers
	// ERR_VERS (Linux knfsd does); 1 speaks version 1 only.
	RDMAVers int
	// NoRPRC (ours: norprc; rprc, the default, undoes it, proto=rdma
	// only) stops the client from announcing responder-provided Read
	// chunks on RPC-over-RDMA version 2: READDIR, READDIRPLUS and
	// READLINK then offer a Reply chunk sized for the largest reply, as
	// in version 1.
	NoRPRC bool
	// SendDDP (ours: sddp, the default with proto=rdma unless
	// rdmavers=1; nosddp undoes it) announces send-based DDP on
	// RPC-over-RDMA version 2: WRITE and READ data of up to 12 KiB goes
	// inside the Send, into the page-aligned part of the receive
	// buffers, instead of a Read or Write chunk, when the server
	// announces it too (the connection's buffers become
	// rpcrdma.SDDPInline bytes, 16 KiB, instead of 4 KiB).
	SendDDP bool
	// SendDDPGroups (ours: sddpgroups, off by default; nosddpgroups
	// undoes it; needs send-based DDP) also sends WRITE data and asks for
	// READ data of more than 12 KiB, up to 192 KiB, by send-based DDP
	// across several Sends (rpcrdma.ClientOptions.SendDDPGroups) instead
	// of a chunk; on software iWARP it costs more than the chunk.
	SendDDPGroups bool
	// RDMADevice chooses the verbs provider for proto=rdma (ours):
	// "auto" (default: a kernel RDMA device that reaches the server when
	// the driver is built with the ibverbs tag, else software iWARP),
	// "siw", "ibverbs", or a device name such as mlx5_0.
	RDMADevice string
	// NoMPACRC (ours: nompacrc; mpacrc, the default, undoes it) makes the
	// software iWARP provider ask the server not to use the MPA CRC32c
	// (RFC 5044 section 4.4; siw.Config.NoCRC). MPA uses the CRC when
	// either end asks, so it goes off only with a server that does not
	// ask either, as Linux siw by default. For Linux siw servers whose
	// CRC check of a trailer split across two TCP segments fails (the
	// kernel peer's 6.1 siw) this keeps the connection up. With a kernel
	// RDMA device (rdmadev chose one) the hardware negotiates and this has
	// no effect. proto=rdma only.
	NoMPACRC bool
	// ReadAheadKB is the mount's kernel read-ahead in KiB (ours:
	// read_ahead_kb=N, the name of the knob in /sys/class/bdi/*/, where
	// Linux NFS mounts are tuned too); 0 leaves the kernel's default.
	// Default DefaultReadAheadKB.
	ReadAheadKB int
	// LocalLock says which locks stay local to the mount instead of going
	// to the server with NLM (nfs(5) local_lock): LocalLockNone (the
	// default: fcntl and flock locks are coherent across mounts and
	// hosts), LocalLockAll, LocalLockFlock or LocalLockPosix. nolock is
	// local_lock=all; lock is local_lock=none.
	LocalLock string
	// NConnect is the number of connections to the NFS service (nfs(5)
	// nconnect=N, 1..MaxNConnect; default 1), over Proto; NFS calls are
	// spread over them, MOUNT and NLM keep one. With proto=rdma each
	// connection asks Credits/NConnect credits, at least 1.
	NConnect int
	// LockPort is the TCP port of the server's NLM service (nfs(5)
	// lockport); 0 asks the server's rpcbind at the first lock.
	LockPort int
	// FuseURing is how the FUSE server gets the kernel's requests (ours:
	// fuse_uring=off|auto|on): FuseURingOff reads /dev/fuse (the
	// default); FuseURingAuto uses FUSE over io_uring where the kernel
	// offers it (the fuse module's enable_uring), /dev/fuse elsewhere;
	// FuseURingOn fails the mount without it.
	FuseURing string
	// XprtSec is the transport security of the mount's TCP connections
	// (nfs(5) xprtsec=none|tls|mtls; RFC 9289 RPC-with-TLS): XprtSecNone
	// (the default) plaintext; XprtSecTLS a TLS 1.3 session in which the
	// server's certificate is verified; XprtSecMTLS that and the mount's
	// own certificate presented. It covers NFS over TCP, MOUNT and NLM;
	// with proto=rdma the NFS connection itself is not covered (RFC 9289
	// defines TLS for TCP only) and only MOUNT and NLM use it.
	XprtSec string
}

// xprtsec values (nfs(5)).
const (
	XprtSecNone = "none"
	XprtSecTLS  = "tls"
	XprtSecMTLS = "mtls"
)

// fuse_uring values.
const (
	FuseURingOff  = "off"
	FuseURingAuto = "auto"
	FuseURingOn   = "on"
)

// local_lock values (nfs(5)).
const (
	LocalLockNone  = "none"
	LocalLockAll   = "all"
	LocalLockFlock = "flock"
	LocalLockPosix = "posix"
)

// LocalFlock reports whether flock(2) locks stay local to the mount.
func (o *Options) LocalFlock() bool {
	return o.LocalLock == LocalLockAll || o.LocalLock == LocalLockFlock
}

// LocalPosix reports whether fcntl(2) (POSIX) locks stay local to the mount.
func (o *Options) LocalPosix() bool {
	return o.LocalLock == LocalLockAll || o.LocalLock == LocalLockPosix
}

// Default returns the defaults of nfs(5) for vers=3 over TCP:
// hard, timeo=600 (60 s), retrans=2, acregmin=3, acregmax=60,
// acdirmin=30, acdirmax=60, rw, lock (local_lock=none), nconnect=1; and ours:
// read_ahead_kb=4096.
func Default() Options {
	return Options{
		Proto: ProtoTCP, Vers: 3, Timeo: 60 * time.Second, Retrans: 2, ReadAheadKB: DefaultReadAheadKB,
		LocalLock: LocalLockNone, NConnect: 1, FuseURing: FuseURingOff, XprtSec: XprtSecNone,
		ACRegMin: 3 * time.Second, ACRegMax: 60 * time.Second,
		ACDirMin: 30 * time.Second, ACDirMax: 60 * time.Second,
	}
}

// Parse parses a comma-separated option list ("proto=rdma,port=20049,
// ro,actimeo=0") over Default; later options override earlier
// ones, as in mount(8). Times are given as nfs(5) does: timeo in
// deciseconds, ac* in seconds. An unknown option or a bad value is an
// error wrapping ErrBadOption; nothing is ignored.
func Parse(s string) (Options, error) {
	o := Default()
	if strings.TrimSpace(s) == "" {
		return o, nil
	}
	sddpSet := false
	for _, opt := range strings.Split(s, ",") {
		opt = strings.TrimSpace(opt)
		if opt == "" {
			continue
		}
		key, val, hasVal := strings.Cut(opt, "=")
		flag := func() error {
			if hasVal {
				return fmt.Errorf("%w: %q takes no value", ErrBadOption, key)
			}
			return nil
		}
		num := func(lo, hi int) (int, error) {
			if !hasVal {
				return 0, fmt.Errorf("%w: %q needs a value", ErrBadOption, key)
			}
			n, err := strconv.Atoi(val)
			if err != nil || n < lo || n > hi {
				return 0, fmt.Errorf("%w: %s=%q: want an integer in [%d, %d]", ErrBadOption, key, val, lo, hi)
			}
			return n, nil
		}
		secs := func() (time.Duration, error) {
			n, err := num(0, 3600*24*365)
			return time.Duration(n) * time.Second, err
		}
		var err error
		switch key {
		case "proto":
			switch {
			case !hasVal:
				err = fmt.Errorf("%w: proto needs a value", ErrBadOption)
			case val == ProtoTCP || val == ProtoRDMA:
				o.Proto = val
			default:
				err = fmt.Errorf("%w: proto=%q: want tcp or rdma", ErrBadOption, val)
			}
		case "port":
			o.Port, err = num(0, 65535)
		case "mountport":
			o.MountPort, err = num(0, 65535)
		case "vers", "nfsvers":
			if o.Vers, err = num(0, 1<<30); err == nil && o.Vers != 3 {
				err = fmt.Errorf("%w: vers=%d: only NFS version 3 is supported", ErrBadOption, o.Vers)
			}
		case "rsize":
			o.RSize, err = num(1, 1<<30)
		case "wsize":
			o.WSize, err = num(1, 1<<30)
		case "hard":
			o.Soft, err = false, flag()
		case "soft":
			o.Soft, err = true, flag()
		case "timeo":
			var n int
			n, err = num(1, 36000)
			o.Timeo = time.Duration(n) * 100 * time.Millisecond
		case "retrans":
			o.Retrans, err = num(0, 1000)
		case "ac":
			o.NoAC, err = false, flag()
		case "noac":
			o.NoAC, err = true, flag()
		case "acregmin":
			o.ACRegMin, err = secs()
		case "acregmax":
			o.ACRegMax, err = secs()
		case "acdirmin":
			o.ACDirMin, err = secs()
		case "acdirmax":
			o.ACDirMax, err = secs()
		case "actimeo":
			var d time.Duration
			d, err = secs()
			o.ACRegMin, o.ACRegMax, o.ACDirMin, o.ACDirMax = d, d, d, d
		case "ro":
			o.ReadOnly, err = true, flag()
		case "rw":
			o.ReadOnly, err = false, flag()
		case "credits":
			o.Credits, err = num(1, MaxCredits)
		case "rdmavers":
			o.RDMAVers, err = num(1, 2)
		case "rprc":
			o.NoRPRC, err = false, flag()
		case "norprc":
			o.NoRPRC, err = true, flag()
		case "sddp":
			o.SendDDP, sddpSet, err = true, true, flag()
		case "nosddp":
			o.SendDDP, sddpSet, err = false, true, flag()
		case "sddpgroups":
			o.SendDDPGroups, err = true, flag()
		case "nosddpgroups":
			o.SendDDPGroups, err = false, flag()
		case "read_ahead_kb":
			o.ReadAheadKB, err = num(0, MaxReadAheadKB)
		case "mpacrc":
			o.NoMPACRC, err = false, flag()
		case "nompacrc":
			o.NoMPACRC, err = true, flag()
		case "lock":
			o.LocalLock, err = LocalLockNone, flag()
		case "nolock":
			o.LocalLock, err = LocalLockAll, flag()
		case "local_lock":
			switch val {
			case LocalLockNone, LocalLockAll, LocalLockFlock, LocalLockPosix:
				o.LocalLock = val
			default:
				err = fmt.Errorf("%w: local_lock=%q: want none, all, flock or posix", ErrBadOption, val)
			}
		case "fuse_uring":
			switch val {
			case FuseURingOff, FuseURingAuto, FuseURingOn:
				o.FuseURing = val
			default:
				err = fmt.Errorf("%w: fuse_uring=%q: want off, auto or on", ErrBadOption, val)
			}
		case "xprtsec":
			switch val {
			case XprtSecNone, XprtSecTLS, XprtSecMTLS:
				o.XprtSec = val
			default:
				err = fmt.Errorf("%w: xprtsec=%q: want none, tls or mtls", ErrBadOption, val)
			}
		case "nconnect":
			o.NConnect, err = num(1, MaxNConnect)
		case "lockport":
			o.LockPort, err = num(0, 65535)
		case "rdmadev":
			if !hasVal || val == "" {
				err = fmt.Errorf("%w: rdmadev needs a value (auto, siw, ibverbs or a device name)", ErrBadOption)
			}
			o.RDMADevice = val
		default:
			err = fmt.Errorf("%w: unknown option %q", ErrBadOption, opt)
		}
		if err != nil {
			return Options{}, err
		}
	}
	if o.ACRegMax < o.ACRegMin {
		o.ACRegMax = o.ACRegMin
	}
	if o.ACDirMax < o.ACDirMin {
		o.ACDirMax = o.ACDirMin
	}
	if o.RDMADevice != "" && o.Proto != ProtoRDMA {
		return Options{}, fmt.Errorf("%w: rdmadev=%s needs proto=rdma", ErrBadOption, o.RDMADevice)
	}
	if o.NoMPACRC && o.Proto != ProtoRDMA {
		return Options{}, fmt.Errorf("%w: nompacrc needs proto=rdma", ErrBadOption)
	}
	if o.RDMAVers != 0 && o.Proto != ProtoRDMA {
		return Options{}, fmt.Errorf("%w: rdmavers=%d needs proto=rdma", ErrBadOption, o.RDMAVers)
	}
	if o.NoRPRC && o.Proto != ProtoRDMA {
		return Options{}, fmt.Errorf("%w: norprc needs proto=rdma", ErrBadOption)
	}
	if o.SendDDP && o.Proto != ProtoRDMA {
		return Options{}, fmt.Errorf("%w: sddp needs proto=rdma", ErrBadOption)
	}
	if !sddpSet {
		o.SendDDP = o.Proto == ProtoRDMA && o.RDMAVers != 1
	}
	if o.SendDDPGroups && !o.SendDDP {
		return Options{}, fmt.Errorf("%w: sddpgroups needs send-based DDP (proto=rdma, sddp)", ErrBadOption)
	}
	if o.Credits != 0 && o.Proto != ProtoRDMA {
		return Options{}, fmt.Errorf("%w: credits=%d needs proto=rdma", ErrBadOption, o.Credits)
	}
	return o, nil
}

// NFSPort returns the NFS port to use: Port, or DefaultRDMAPort for RDMA
// when Port is 0 (0 for TCP means ask rpcbind).
func (o *Options) NFSPort() int {
	if o.Port == 0 && o.Proto == ProtoRDMA {
		return DefaultRDMAPort
	}
	return o.Port
}

// RegTimeouts returns (min, max) of the attribute cache of
// non-directories (acregmin, acregmax), 0 with noac.
func (o *Options) RegTimeouts() (time.Duration, time.Duration) {
	if o.NoAC {
		return 0, 0
	}
	return o.ACRegMin, o.ACRegMax
}

// DirTimeouts returns (min, max) of the attribute cache of directories
// (acdirmin, acdirmax), 0 with noac.
func (o *Options) DirTimeouts() (time.Duration, time.Duration) {
	if o.NoAC {
		return 0, 0
	}
	return o.ACDirMin, o.ACDirMax
}

// SplitSource splits a mount source "SERVER:/EXPORT" into server and
// export path (nfs(5)). The server may be a bracketed IPv6 address
// ("[::1]:/x"). Errors wrap ErrBadOption.
func SplitSource(src string) (server, export string, err error) {
	i := strings.Index(src, ":/")
	if strings.HasPrefix(src, "[") {
		j := strings.Index(src, "]:/")
		if j <= 1 {
			return "", "", fmt.Errorf("%w: source %q: want [IPV6]:/EXPORT", ErrBadOption, src)
		}
		return src[1:j], src[j+2:], nil
	}
	if i <= 0 {
		return "", "", fmt.Errorf("%w: source %q: want SERVER:/EXPORT", ErrBadOption, src)
	}
	return src[:i], src[i+1:], nil
}
