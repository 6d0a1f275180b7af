// Package admin is the export server's admin API: the types, the errors,
// the client the CSI controller uses and the HTTP handler the export
// server serves (NewHandler over a Service, `driver server
// --admin-listen`), to manage what NFS cannot express: per-volume exports with their quota and client
// list, server-side snapshots and clones, and the RPC-over-RDMA credits
// granted to each pod's connections.
//
// # Wire protocol
//
// HTTP/1.1 with JSON bodies. Every request carries "Authorization: Bearer
// TOKEN"; a missing or wrong token is 401. With the token in a file
// (TokenFile: a Kubernetes Secret's), the server and the client follow a
// rotation without a restart (the previous token is accepted, and tried,
// for RotationGrace), and the token is never logged. Errors are a JSON object
// {"error": "message", "code": "NotFound"} with the code's status:
// NotFound 404, InvalidArgument 400, AlreadyExists 409, FailedPrecondition
// 412, Unauthenticated 401, Internal 500. Volume paths and clone
// destinations travel in the URL path, each segment escaped.
//
//	GET    /v1/status                       Status
//	GET    /v1/volumes                      {"volumes": [Volume...]}
//	GET    /v1/volumes/{path...}            Volume
//	PUT    /v1/volumes/{path...}            {"quotaBytes": N, "create": {"mode": M}} -> Volume
//	DELETE /v1/volumes/{path...}?directory=retain|delete|archive  (empty)
//	PUT    /v1/access/{path...}             Access -> Volume
//	DELETE /v1/access/{path...}?node=NODE   (empty)
//	GET    /v1/snapshots                    {"snapshots": [Snapshot...]}
//	GET    /v1/snapshots/{id}               Snapshot
//	PUT    /v1/snapshots/{id}               {"source": PATH} -> Snapshot
//	DELETE /v1/snapshots/{id}               (empty)
//	GET    /v1/clones/{dest...}             Clone
//	PUT    /v1/clones/{dest...}             Clone -> Clone
//	GET    /v1/credits                      Credits (grants and connections)
//	PUT    /v1/credits                      Credits (grants) -> Credits
package admin

import (
	"errors"
	"time"
)

// Errors of the admin API. Every error a Client returns for an error
// answer of the server wraps one of them (errors.Is) and carries the
// server's message.
var (
	// ErrNotFound: the volume, snapshot or clone is unknown (HTTP 404).
	ErrNotFound = errors.New("admin: not found")
	// ErrInvalid: a malformed argument, e.g. a path leaving the root or
	// an address that is not an IP or CIDR (HTTP 400).
	ErrInvalid = errors.New("admin: invalid argument")
	// ErrExists: the name exists with different content, e.g. a snapshot
	// id taken by another source (HTTP 409).
	ErrExists = errors.New("admin: already exists")
	// ErrPrecondition: the server's state forbids the request, e.g. the
	// volume directory does not exist or a clone destination is not empty
	// (HTTP 412).
	ErrPrecondition = errors.New("admin: failed precondition")
	// ErrUnauthenticated: no or a wrong bearer token (HTTP 401).
	ErrUnauthenticated = errors.New("admin: unauthenticated")
	// ErrInternal: the server failed, e.g. it could not write its state
	// file; the request may be retried (HTTP 500, or any status this
	// package does not know).
	ErrInternal = errors.New("admin: internal error")
)

// Error codes carried in the "code" field of an error answer.
const (
	CodeNotFound           = "NotFound"
	CodeInvalidArgument    = "InvalidArgument"
	CodeAlreadyExists      = "AlreadyExists"
	CodeFailedPrecondition = "FailedPrecondition"
	CodeUnauthenticated    = "Unauthenticated"
	CodeInternal           = "Internal"
)

// Volume is a directory under the export server's root registered as its
// own export "/"+Path, with a quota and a client list.
type Volume struct {
	// Path is the directory relative to the server root, e.g. "pvc-1" or
	// "ns/pvc-1"; nodes mount SERVER:/Path.
	Path string `json:"path"`
	// QuotaBytes is the most bytes the volume's tree may allocate; 0 means
	// unlimited.
	QuotaBytes int64 `json:"quotaBytes"`
	// UsedBytes is the bytes allocated in the tree (st_blocks*512, hard
	// links counted once).
	UsedBytes int64 `json:"usedBytes"`
	// UsedInodes is the number of inodes in the tree, its root included.
	UsedInodes int64 `json:"usedInodes"`
	// Access lists the nodes granted access, sorted by Node. An empty list
	// allows no client.
	Access []Access `json:"access"`
	// Meta is the caller's metadata kept with the volume (set by
	// PutVolume; e.g. the CSI volume id): at most MaxMetaEntries entries,
	// keys of at most MaxMetaKey bytes, values of at most MaxMetaValue.
	Meta map[string]string `json:"meta,omitempty"`
}

// Limits of Volume.Meta.
const (
	MaxMetaEntries = 32
	MaxMetaKey     = 253
	MaxMetaValue   = 1024
)

// Access grants one node access to a volume.
type Access struct {
	// Node is the CSI node id.
	Node string `json:"node"`
	// Name is the node's name as its RPC-with-TLS certificate names it
	// (its first DNS subjectAltName, else its CN; RFC 9289 section
	// 5.2.1): a client whose verified certificate names it is granted
	// the volume whatever its address. Empty: addresses only.
	Name string `json:"name,omitempty"`
	// Addrs are the IP addresses or CIDRs the node's calls come from.
	Addrs []string `json:"addrs"`
	// ReadOnly makes every modifying NFS call of the node fail with
	// NFS3ERR_ROFS.
	ReadOnly bool `json:"readOnly"`
}

// Snapshot is a server-side copy of a volume's tree, outside every export.
type Snapshot struct {
	ID string `json:"id"`
	// Source is the path of the volume copied.
	Source string `json:"source"`
	// SourceMeta is the source volume's Meta when the snapshot was
	// created.
	SourceMeta map[string]string `json:"sourceMeta,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
	// SizeBytes is the apparent size of the source's files, in bytes,
	// when the copy started: the total to copy.
	SizeBytes int64 `json:"sizeBytes"`
	// CopiedBytes is the bytes copied so far.
	CopiedBytes int64 `json:"copiedBytes"`
	// Ready is true once the copy is complete.
	Ready bool `json:"ready"`
	// Error describes a failed copy; the job is not retried automatically
	// (delete the snapshot and create it again).
	Error string `json:"error,omitempty"`
}

// Clone is the job filling a volume directory from a snapshot or from
// another volume.
type Clone struct {
	// Dest is the destination volume path (an existing, empty directory).
	Dest string `json:"dest"`
	// FromSnapshot and FromVolume name the source; exactly one is set.
	FromSnapshot string `json:"fromSnapshot,omitempty"`
	FromVolume   string `json:"fromVolume,omitempty"`
	// SizeBytes is the total to copy and CopiedBytes the bytes copied so
	// far (apparent file sizes).
	SizeBytes   int64 `json:"sizeBytes"`
	CopiedBytes int64 `json:"copiedBytes"`
	// Ready is true once the copy is complete.
	Ready bool `json:"ready"`
	// Error describes a failed copy; the job is not retried automatically.
	Error string `json:"error,omitempty"`
}

// Status describes the export server.
type Status struct {
	// Version is the server binary's version.
	Version string `json:"version"`
	// Root is the local directory served.
	Root string `json:"root"`
	// Volumes is the number of registered volumes.
	Volumes int `json:"volumes"`
	// CapacityBytes and FreeBytes are the size of the root's file system
	// and the bytes available in it to unprivileged users (statfs(2)).
	CapacityBytes int64 `json:"capacityBytes"`
	FreeBytes     int64 `json:"freeBytes"`
}

// MaxMachineName is the longest AUTH_SYS machine name, in bytes (RFC 5531
// appendix A).
const MaxMachineName = 255

// Credits is the body of GET and PUT /v1/credits: the RPC-over-RDMA
// credits (RFC 8166 section 3.3.1) the server grants to the connections of
// each AUTH_SYS machine name (RFC 5531 appendix A; the CSI node plugin
// names each pod's mount "NODE/NAMESPACE/POD"). A PUT replaces every grant;
// machines without one get the server's default (`driver server
// --credits`). Each grant is at least 1; the server caps it at its
// per-connection credits and shares its receive budget among connections
// (`--credits-budget`), so a connection can be granted less.
type Credits struct {
	Grants map[string]int `json:"grants"`
	// Connections are the server's RPC-over-RDMA connections now, in a
	// GET answer only.
	Connections []Connection `json:"connections,omitempty"`
}

// Connection is one RPC-over-RDMA connection of the export server.
type Connection struct {
	Peer string `json:"peer"`
	// Machine is the AUTH_SYS machine name of its latest call ("" before).
	Machine string `json:"machine"`
	// Named is true when Machine has a grant of its own; Target is that
	// grant or the default, capped by the per-connection credits.
	Named  bool `json:"named"`
	Target int  `json:"target"`
	// Grant is the credits its replies carry (Target, or less to fit the
	// receive budget); Posted its receives posted; InProcess its calls
	// being processed.
	Grant     int `json:"grant"`
	Posted    int `json:"posted"`
	InProcess int `json:"inProcess"`
}

// ErrorBody is the JSON body of an error answer.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// QuotaRequest is the body of PUT /v1/volumes/{path}.
type QuotaRequest struct {
	QuotaBytes int64 `json:"quotaBytes"`
	// Meta replaces the volume's metadata; absent (nil) keeps it.
	Meta map[string]string `json:"meta,omitempty"`
	// Create, when set, makes the directory first if it is missing (its
	// missing parents with mode 0755) and sets its mode to Create.Mode.
	Create *DirRequest `json:"create,omitempty"`
}

// DirRequest asks the server to make a volume's directory.
type DirRequest struct {
	// Mode is the directory's permission bits, setgid and sticky
	// (e.g. 0o777); the server's umask does not apply.
	Mode uint32 `json:"mode"`
}

// What DELETE /v1/volumes/{path}?directory=HOW does with the directory
// once the volume is unregistered (the CSI parameter onDelete).
const (
	DirectoryRetain  = "retain"  // keep it (the default)
	DirectoryDelete  = "delete"  // remove it and its tree
	DirectoryArchive = "archive" // rename it "archived-NAME" beside itself
)

// SnapshotRequest is the body of PUT /v1/snapshots/{id}.
type SnapshotRequest struct {
	Source string `json:"source"`
}

// VolumeList is the body of GET /v1/volumes.
type VolumeList struct {
	Volumes []Volume `json:"volumes"`
}

// SnapshotList is the body of GET /v1/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// CodeOf returns the error code and HTTP status of err: the code of the
// sentinel it wraps, CodeInternal (500) otherwise.
func CodeOf(err error) (code string, status int) {
	switch {
	case errors.Is(err, ErrNotFound):
		return CodeNotFound, 404
	case errors.Is(err, ErrInvalid):
		return CodeInvalidArgument, 400
	case errors.Is(err, ErrExists):
		return CodeAlreadyExists, 409
	case errors.Is(err, ErrPrecondition):
		return CodeFailedPrecondition, 412
	case errors.Is(err, ErrUnauthenticated):
		return CodeUnauthenticated, 401
	}
	return CodeInternal, 500
}

// sentinel returns the error of code, or of HTTP status when the code is
// unknown.
func sentinel(code string, status int) error {
	switch code {
	case CodeNotFound:
		return ErrNotFound
	case CodeInvalidArgument:
		return ErrInvalid
	case CodeAlreadyExists:
		return ErrExists
	case CodeFailedPrecondition:
		return ErrPrecondition
	case CodeUnauthenticated:
		return ErrUnauthenticated
	case CodeInternal:
		return ErrInternal
	}
	switch status {
	case 404:
		return ErrNotFound
	case 400:
		return ErrInvalid
	case 409:
		return ErrExists
	case 412:
		return ErrPrecondition
	case 401:
		return ErrUnauthenticated
	}
	return ErrInternal
}
