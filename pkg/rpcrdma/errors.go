package rpcrdma

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test them with errors.Is; the errors returned by this
// package wrap them with detail.
var (
	// ErrVers means rdma_vers is not 1 (RFC 8166 section 4.2.2). A
	// responder answers RDMA_ERROR with ERR_VERS, rdma_vers_low = 1 and
	// rdma_vers_high = 1 (section 4.5.1).
	ErrVers = errors.New("rpcrdma: unsupported RPC-over-RDMA version")

	// ErrChunk means the transport header could not be parsed or names
	// chunks this implementation refuses (RFC 8166 section 4.5.2), or a
	// reply cannot be returned within the chunks the requester provided
	// (sections 3.4.6, 4.3.3, 4.5.3; RFC 8267 section 3). A responder
	// answers RDMA_ERROR with ERR_CHUNK; a requester silently discards a
	// reply whose header fails with it.
	ErrChunk = errors.New("rpcrdma: header or chunk error (ERR_CHUNK)")

	// ErrShort means the message ended inside the transport header. Every
	// error that wraps ErrShort also wraps ErrChunk: a truncated header is
	// an XDR parsing error (RFC 8166 section 4.5.2), answered with
	// ERR_CHUNK when the message is at least MinHeaderLen (28) bytes long
	// and silently discarded otherwise (section 4.5).
	ErrShort = errors.New("rpcrdma: message shorter than its transport header")

	// ErrInvalid means a caller's argument is out of range: sizes given to
	// the planners, private data sizes, or a Header that must not be sent
	// (for example RDMA_MSGP or RDMA_DONE, RFC 8166 section 4.6).
	ErrInvalid = errors.New("rpcrdma: invalid argument")
)

// HeaderError describes a transport header that failed to decode or that
// Encode refused. It matches its Kind with errors.Is, and also ErrChunk when
// Kind is ErrShort.
type HeaderError struct {
	Kind   error  // ErrVers, ErrChunk, ErrShort or ErrInvalid
	Offset int    // byte offset in the message of the offending item
	Reason string // what is wrong, for people
}

func (e *HeaderError) Error() string {
	return fmt.Sprintf("%v: at byte %d: %s", e.Kind, e.Offset, e.Reason)
}

// Unwrap returns Kind, and ErrChunk too when Kind is ErrShort.
func (e *HeaderError) Unwrap() []error {
	if e.Kind == ErrShort {
		return []error{ErrShort, ErrChunk}
	}
	return []error{e.Kind}
}

func headerErr(kind error, off int, format string, args ...any) error {
	return &HeaderError{Kind: kind, Offset: off, Reason: fmt.Sprintf(format, args...)}
}
