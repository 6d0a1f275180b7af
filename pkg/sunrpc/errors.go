package sunrpc

import (
	"errors"
	"fmt"
)

// Sentinel errors, for errors.Is. Errors returned by this package wrap one of
// them (with %w) together with the underlying cause.
var (
	// ErrProgUnavail: the server does not export the program
	// (accept_stat PROG_UNAVAIL, RFC 5531 section 9).
	ErrProgUnavail = errors.New("sunrpc: program unavailable")
	// ErrProgMismatch: the server exports the program but not the requested
	// version (accept_stat PROG_MISMATCH). The returned error is a
	// *MismatchError carrying the supported range.
	ErrProgMismatch = errors.New("sunrpc: program version mismatch")
	// ErrProcUnavail: the program has no such procedure (accept_stat PROC_UNAVAIL).
	ErrProcUnavail = errors.New("sunrpc: procedure unavailable")
	// ErrGarbageArgs: the server could not decode the arguments (accept_stat GARBAGE_ARGS).
	ErrGarbageArgs = errors.New("sunrpc: garbage arguments")
	// ErrSystemErr: the server failed for another reason, e.g. memory
	// allocation (accept_stat SYSTEM_ERR).
	ErrSystemErr = errors.New("sunrpc: system error")
	// ErrRPCMismatch: the peer does not speak RPC version 2 (reject_stat
	// RPC_MISMATCH). The returned error is a *MismatchError.
	ErrRPCMismatch = errors.New("sunrpc: RPC version mismatch")
	// ErrAuth: the server rejected the credential or verifier (reject_stat
	// AUTH_ERROR). The returned error is an *AuthError carrying the auth_stat.
	ErrAuth = errors.New("sunrpc: authentication error")

	// ErrMalformed: bytes from the network are not a well-formed RPC message
	// (RFC 5531 section 9); wraps the xdr error when there is one.
	ErrMalformed = errors.New("sunrpc: malformed message")
	// ErrConnLost: the connection died before the reply arrived. The call
	// may be retransmitted with the same XID on a new connection
	// (RFC 5531 section 9: the XID lets servers detect retransmissions).
	ErrConnLost = errors.New("sunrpc: connection lost")
	// ErrTimeout: a soft-mode call got no reply after the allowed number of
	// retransmissions.
	ErrTimeout = errors.New("sunrpc: timed out")
	// ErrRecordTooLarge: a record-marked record (RFC 5531 section 11) is
	// larger than the configured maximum; the connection is closed.
	ErrRecordTooLarge = errors.New("sunrpc: record too large")
	// ErrClosed: the client or transport was closed by its owner.
	ErrClosed = errors.New("sunrpc: closed")
	// ErrDuplicateXID: a call with this XID is already outstanding on the transport.
	ErrDuplicateXID = errors.New("sunrpc: duplicate XID outstanding")

	// ErrTLSRefused: the server answered the AUTH_TLS probe without the
	// STARTTLS verifier (RFC 9289 section 4.1): it does not do
	// RPC-with-TLS on this port, or does not offer it to this client. A
	// client whose policy asks for TLS does not fall back to plaintext.
	// When the server denied the probe the error also wraps its *AuthError.
	ErrTLSRefused = errors.New("sunrpc: server refused RPC-with-TLS")
	// ErrTLSHandshake: the TLS handshake that RPC-with-TLS starts failed
	// for a reason other than the connection failing: a certificate did
	// not verify (expired, unknown authority, wrong name), the peer sent
	// an alert refusing ours, no TLS 1.3, no common ALPN protocol (RFC
	// 9289 section 5). It wraps the crypto/tls or crypto/x509 error
	// (errors.As a *tls.CertificateVerificationError, x509.CertificateInvalidError,
	// x509.UnknownAuthorityError, *net.OpError "remote error").
	ErrTLSHandshake = errors.New("sunrpc: RPC-with-TLS handshake failed")
)

// MismatchError is a version mismatch with the range the peer supports:
// PROG_MISMATCH (Err == ErrProgMismatch) or RPC_MISMATCH (Err ==
// ErrRPCMismatch), RFC 5531 section 9. errors.Is(err, e.Err) holds; use
// errors.As to read Low and High.
type MismatchError struct {
	Err       error  // ErrProgMismatch or ErrRPCMismatch
	Low, High uint32 // lowest and highest version supported
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%v (supported %d..%d)", e.Err, e.Low, e.High)
}

// Unwrap returns the sentinel.
func (e *MismatchError) Unwrap() error { return e.Err }

// AuthError is an authentication failure with its auth_stat (RFC 5531
// section 9, reject_stat AUTH_ERROR). It matches ErrAuth, and Err, the
// local cause when there is one (e.g. the xdr error of a malformed
// credential).
type AuthError struct {
	Stat AuthStat
	Err  error // optional cause
}

func (e *AuthError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%v: %v: %v", ErrAuth, e.Stat, e.Err)
	}
	return fmt.Sprintf("%v: %v", ErrAuth, e.Stat)
}

// Unwrap returns ErrAuth and the cause.
func (e *AuthError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrAuth, e.Err}
	}
	return []error{ErrAuth}
}
