// Package mounter keeps the FUSE servers of a node's volume mounts alive
// outside the CSI node plugin's lifetime.
//
// The node plugin (privileged) opens /dev/fuse, mounts it on the pod's
// target path with mount(2) "fd=N", and hands the open fd over a unix
// socket (SCM_RIGHTS) to the mounter, a separate long-lived process (its
// own container in the node DaemonSet). The mounter starts one
// `driver mount --fuse-fd 3 --ready-fd 4 ...` process per mount, which
// answers the kernel's FUSE INIT on the inherited fd and serves the NFS
// export. Restarting the node plugin therefore never breaks a pod's mount
// ("transport endpoint is not connected"); the plugin asks the mounter
// what it serves when it starts again. This is the split mountpoint-s3's
// and gcsfuse's CSI drivers use.
//
// The node plugin also keeps a duplicate of each mount's /dev/fuse
// descriptor (Keeper, on its own socket): the kernel keeps a FUSE
// connection while any process holds one, so when the mounter's
// container dies with every mount process in it (kill -9 of its main
// process, an OOM kill), the connections stay, and the restarted mounter
// fetches each from the keeper and starts a `driver mount --recover` on
// it, which asks the kernel to queue again the requests the dead process
// had read (FUSE_NOTIFY_RESEND). A restarted node plugin gets its
// duplicates back from the mounter (OpDuplicate).
//
// Wire protocol: one request per connection on a SOCK_SEQPACKET unix
// socket, one JSON Request (at most MaxMessage bytes) with the fd as
// ancillary data for OpMount, answered by one JSON Response (at most
// MaxMessage bytes; an OpList answer too long for one message is split
// into several whose Mounts add up), after which the mounter closes the
// connection. A client that closes its end before the answer abandons
// the request (a mount in progress is stopped).
package mounter

import (
	"errors"
	"time"
)

// MaxMessage is the largest request or response on the socket, in bytes.
const MaxMessage = 64 << 10

// Operations of a Request.
const (
	// OpMount starts a FUSE server for the fd carried with the request.
	OpMount = "mount"
	// OpList lists the mounts being served.
	OpList = "list"
	// OpRelease waits (bounded) for the FUSE server of Target to exit
	// after the caller unmounted Target, and kills it when it does not.
	OpRelease = "release"
	// OpDuplicate answers with a duplicate of the /dev/fuse descriptor of
	// Target's connection, as the response's one fd.
	OpDuplicate = "duplicate"
)

// Operations of a Request to a Keeper (its own socket).
const (
	// OpFetch answers with the keeper's duplicate of Target's
	// connection, as the response's one fd, or an error naming
	// ErrNotKept.
	OpFetch = "fetch"
	// OpForget closes the keeper's duplicate of Target's connection (no
	// error when it has none): the mounter gave the mount up, and the
	// connection must end so that its callers get ENOTCONN.
	OpForget = "forget"
)

// Request is one call to the mounter.
type Request struct {
	Op string `json:"op"`
	// Mount describes the mount (OpMount) or names its Target (OpRelease).
	Mount Mount `json:"mount"`
	// Timeout bounds OpRelease's wait, in milliseconds (default 10 s).
	TimeoutMillis int64 `json:"timeoutMillis,omitempty"`
}

// Mount is one FUSE mount served by a `driver mount` process.
type Mount struct {
	// Target is the mount point (absolute path); it identifies the mount.
	Target string `json:"target"`
	// Source is SERVER:/EXPORT.
	Source string `json:"source"`
	// Options are `driver mount -o` options (nfs(5) vocabulary).
	Options string `json:"options,omitempty"`
	// MachineName is the AUTH_SYS machine name of the mount's NFS calls.
	MachineName string `json:"machineName,omitempty"`
	// LockCallerName is the caller_name of the mount's NLM locks: the
	// node's name, shared by every mount of the node.
	LockCallerName string `json:"lockCallerName,omitempty"`
	// VolumeID and PodUID say whose mount it is (logs, metrics).
	VolumeID string `json:"volumeID,omitempty"`
	PodUID   string `json:"podUID,omitempty"`
	// PID of the serving process and when it started (set by the mounter).
	PID     int       `json:"pid,omitempty"`
	Started time.Time `json:"started,omitempty"`
	// Log is the serving process's log file (set by the mounter).
	Log string `json:"log,omitempty"`
	// MetricsSocket is the unix socket where the serving process exposes
	// its Prometheus metrics (set by the mounter; the node plugin's
	// /metrics gathers them with the pod's labels).
	MetricsSocket string `json:"metricsSocket,omitempty"`
	// HandoverSocket is where the serving process listens for a successor
	// (driver mount --takeover), MapFile its state map for a process that
	// takes the mount up after it dies (--recover); set by the mounter.
	HandoverSocket string `json:"handoverSocket,omitempty"`
	MapFile        string `json:"mapFile,omitempty"`
}

// Response answers a Request.
type Response struct {
	// Error is empty on success.
	Error string `json:"error,omitempty"`
	// Mounts: the new mount (OpMount), every mount (OpList).
	Mounts []Mount `json:"mounts,omitempty"`
}

// ErrNotKept is the error of OpFetch for a target the keeper holds no
// connection of.
var ErrNotKept = errors.New("no connection kept")

// ErrMount wraps a mount that failed in the serving process (NFS MOUNT
// refused, server unreachable, bad options): the process's own message.
var ErrMount = errors.New("mounter: mount failed")
