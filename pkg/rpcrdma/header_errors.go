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

	// Version 2 errors (draft-ietf-nfsv4-rpcrdma-version-two section 7),
	// each answered with the RDMA2_ERROR code Errcode2Of names.

	// ErrHType: an rdma_htype the receiver does not know
	// (RDMA2_ERR_INVAL_HTYPE, section 7.1.3).
	ErrHType = errors.New("rpcrdma: unknown header type (RDMA2_ERR_INVAL_HTYPE)")
	// ErrPropVal: a known transport property whose value does not parse
	// (RDMA2_ERR_BAD_PROPVAL, sections 5.1 and 7.2.2).
	ErrPropVal = errors.New("rpcrdma: bad transport property value (RDMA2_ERR_BAD_PROPVAL)")
	// ErrCont: a message out of its continuation sequence
	// (RDMA2_ERR_INVAL_CONT, sections 6.3 and 7.1.4).
	ErrCont = errors.New("rpcrdma: bad message continuation (RDMA2_ERR_INVAL_CONT)")
	// ErrVersMismatch: a message whose rdma_vers differs from the one the
	// connection uses (RDMA2_ERR_VERS_MISMATCH, section 7.1.2).
	ErrVersMismatch = errors.New("rpcrdma: version differs from the connection's (RDMA2_ERR_VERS_MISMATCH)")
	// ErrReadChunks, ErrWriteChunks, ErrSegments: more Read chunks, Write
	// chunks or segments than the responder processes
	// (RDMA2_ERR_READ_CHUNKS, _WRITE_CHUNKS, _SEGMENTS, sections
	// 7.3.1-7.3.3). They also match ErrChunk.
	ErrReadChunks  = errors.New("rpcrdma: too many Read chunks (RDMA2_ERR_READ_CHUNKS)")
	ErrWriteChunks = errors.New("rpcrdma: too many Write chunks (RDMA2_ERR_WRITE_CHUNKS)")
	ErrSegments    = errors.New("rpcrdma: too many segments (RDMA2_ERR_SEGMENTS)")
)

// HeaderError describes a transport header that failed to decode or that
// Encode refused. It matches its Kind with errors.Is, and also ErrChunk when
// Kind is ErrShort.
type HeaderError struct {
	Kind   error  // ErrVers, ErrChunk, ErrShort, ErrInvalid, or a version 2 error
	Offset int    // byte offset in the message of the offending item
	Reason string // what is wrong, for people
	// Max is the limit exceeded, for ErrReadChunks, ErrWriteChunks and
	// ErrSegments (reported in the RDMA2_ERROR).
	Max uint32
}

func (e *HeaderError) Error() string {
	return fmt.Sprintf("%v: at byte %d: %s", e.Kind, e.Offset, e.Reason)
}

// Unwrap returns Kind, and ErrChunk too when Kind is ErrShort,
// ErrReadChunks, ErrWriteChunks or ErrSegments.
func (e *HeaderError) Unwrap() []error {
	switch e.Kind {
	case ErrShort, ErrReadChunks, ErrWriteChunks, ErrSegments:
		return []error{e.Kind, ErrChunk}
	}
	return []error{e.Kind}
}

func headerErr(kind error, off int, format string, args ...any) error {
	return &HeaderError{Kind: kind, Offset: off, Reason: fmt.Sprintf(format, args...)}
}
