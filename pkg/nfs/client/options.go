package client

import (
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// Size limits and defaults.
const (
	// MaxIOSize is the largest rsize and wsize this client uses, 1 MiB
	// (Linux NFS_MAX_FILE_IO_SIZE; also nfs3.DefaultMaxData, the largest
	// READ data nfs3 decodes by default).
	MaxIOSize = 1 << 20
	// DefaultWindow is the default number of READs or WRITEs one ReadAt or
	// WriteAt keeps in flight.
	DefaultWindow = 16
	// DefaultMaxUncommitted is the default bound, in bytes, of the data a
	// File keeps for UNSTABLE writes not yet covered by a COMMIT.
	DefaultMaxUncommitted = 64 << 20
	// DefaultJukeboxDelay is the pause before retrying a call answered with
	// NFS3ERR_JUKEBOX (Linux NFS_JUKEBOX_RETRY_TIME, 5 s).
	DefaultJukeboxDelay = 5 * time.Second
	// DefaultDirCount is the READDIRPLUS maxcount used when the server's
	// FSINFO dtpref is 0, in bytes.
	DefaultDirCount = 32 << 10
)

// Options says what Mount mounts and how.
type Options struct {
	// Server is the server's host name or IP address (no port).
	Server string
	// MountPort is the TCP port of the MOUNT v3 service; 0 asks rpcbind.
	MountPort int
	// NFSPort is the port of the NFSv3 service for the default TCP
	// transport; 0 asks rpcbind (TCP). Ignored when Dial is set.
	NFSPort int
	// RPCBindPort is the port of rpcbind (portmap v2); 0 means 111.
	RPCBindPort int
	// Export is the exported directory to mount, e.g. "/export/vol1"
	// (at most 1024 bytes, RFC 1813 section 5.1.4).
	Export string

	// AuthSys is the AUTH_SYS identity of every MOUNT and NFS call
	// (uid, gid, at most 16 supplementary gids, machine name).
	AuthSys sunrpc.AuthSysParams

	// Dial opens connections to the NFS service: sunrpc.TCPDialer (the
	// default when nil, to Server:NFSPort) or an RPC-over-RDMA dialer.
	// MOUNT and rpcbind always use TCP.
	Dial sunrpc.DialFunc
	// Transport names the transport of Dial in logs ("tcp" when Dial is nil).
	Transport string
	// NConnect is the number of connections to the NFS service (nfs(5)
	// nconnect), 1..MaxNConnect; 0 means 1, more means MaxNConnect. NFS calls are spread
	// round-robin over them (see the package doc, Connections); MOUNT,
	// NLM and NSM keep one connection each. Ignored by New.
	NConnect int
	// WrapDial, when set, wraps the NFS dialer (Dial or the TCP default),
	// e.g. to observe every call and byte for metrics.
	WrapDial func(sunrpc.DialFunc) sunrpc.DialFunc
	// TCP configures the TCP transports this package dials. Its XprtSec
	// and TLS (RPC-with-TLS, RFC 9289; nfs(5) xprtsec=) apply to NFS over
	// TCP, MOUNT and NLM; rpcbind is asked in plaintext, as Linux does.
	// An RPC-over-RDMA Dial is not covered: RFC 9289 defines TLS for TCP
	// only.
	TCP sunrpc.TCPOptions
	// Retry is the RPC retransmission policy of the NFS client (hard by
	// default, as a "hard" mount). MOUNT and rpcbind calls use it too.
	Retry sunrpc.RetryPolicy

	// RSize and WSize cap the READ and WRITE counts, in bytes; 0 means
	// no cap of our own. The sizes used are min(server rtmax/wtmax,
	// option, MaxIOSize).
	RSize, WSize int
	// Window bounds the READs or WRITEs one ReadAt or WriteAt has in
	// flight; 0 means DefaultWindow.
	Window int
	// MaxUncommitted bounds, in bytes, the data of unstable writes a File
	// keeps until COMMIT; 0 means DefaultMaxUncommitted.
	MaxUncommitted int
	// JukeboxDelay is the pause before retrying after NFS3ERR_JUKEBOX; 0
	// means DefaultJukeboxDelay.
	JukeboxDelay time.Duration

	// Lock configures the NLM client (Client.Locks); it connects to the
	// server's NLM service at the first lock call.
	Lock LockOptions
}

// tcpFor returns o.TCP for the connections to program prog version vers,
// which name them in their AUTH_TLS probe (RFC 9289 section 4.1).
func (o *Options) tcpFor(prog, vers uint32) sunrpc.TCPOptions {
	t := o.TCP
	t.ProbeProg, t.ProbeVers = prog, vers
	return t
}

// plainTCP returns o.TCP without RPC-with-TLS: for rpcbind queries
// (rpcbind does not speak RPC-with-TLS; Linux asks it in plaintext too)
// and for MNT to a MOUNT server that refused it (Linux's rpc.mountd;
// Linux's client sends MOUNT in plaintext).
func (o *Options) plainTCP() sunrpc.TCPOptions {
	t := o.TCP
	t.XprtSec, t.TLS = sunrpc.XprtSecNone, nil
	return t
}
