package client

import "errors"

// Errors of this package besides the nfs3.Status values and sunrpc errors.
var (
	// ErrNotRegistered: rpcbind does not know the program over TCP.
	ErrNotRegistered = errors.New("program not registered with rpcbind")
	// ErrMountFailed wraps a MOUNT v3 status other than MNT3_OK (the
	// mount3.Status is wrapped too).
	ErrMountFailed = errors.New("MOUNT failed")
	// ErrNoAuthSys: the export does not accept AUTH_SYS or AUTH_NONE.
	ErrNoAuthSys = errors.New("export accepts neither AUTH_SYS nor AUTH_NONE")
	// ErrShortWrite: the server wrote fewer bytes than sent and then none.
	ErrShortWrite = errors.New("server made no progress on WRITE")
	// ErrBadPath: LookupPath met an absolute symbolic link, too many
	// links (ELOOP-like), or an empty component where none is allowed.
	ErrBadPath = errors.New("cannot resolve path")
)
