package sunrpc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// RPC-with-TLS (RFC 9289): on a TCP connection the client first sends a
// NULL call with an AUTH_TLS credential (the STARTTLS probe); a server that
// offers TLS answers it with an AUTH_NONE verifier holding "STARTTLS", the
// client then starts a TLS 1.3 handshake on the same connection, and RPC
// record marking (RFC 5531 section 11) goes on inside the session. The
// client side is in tls_client.go, the server side in tls_server.go.

// ALPNProtocol is the ALPN protocol identifier of RPC-with-TLS, "sunrpc"
// (RFC 9289 sections 5 and 8.2).
const ALPNProtocol = "sunrpc"

// startTLSVerifier is the body of the AUTH_NONE verifier a server answers
// the AUTH_TLS probe with (RFC 9289 section 4.1).
var startTLSVerifier = [8]byte{'S', 'T', 'A', 'R', 'T', 'T', 'L', 'S'}

// XprtSec is a transport security policy, named as nfs(5)'s xprtsec=
// option names them. On a client it is what every connection must
// establish before its first call; on a server, the least a connection must
// establish before any call but the AUTH_TLS probe is served.
type XprtSec uint8

// Transport security policies.
const (
	// XprtSecNone: plaintext RPC. A client sends no probe; a server
	// given a TLS configuration still offers TLS to the clients that ask.
	XprtSecNone XprtSec = iota
	// XprtSecTLS: RPC-with-TLS; the client authenticates the server,
	// and presents no certificate of its own.
	XprtSecTLS
	// XprtSecMTLS: RPC-with-TLS with mutual authentication: the client
	// presents a certificate that the server verifies.
	XprtSecMTLS
)

var xprtSecNames = [...]string{"none", "tls", "mtls"}

// String returns the policy as nfs(5) spells it: "none", "tls", "mtls".
func (x XprtSec) String() string {
	if int(x) < len(xprtSecNames) {
		return xprtSecNames[x]
	}
	return fmt.Sprintf("xprtsec(%d)", uint8(x))
}

// ParseXprtSec parses "none", "tls" or "mtls" (nfs(5) xprtsec=).
func ParseXprtSec(s string) (XprtSec, error) {
	for i, n := range xprtSecNames {
		if s == n {
			return XprtSec(i), nil
		}
	}
	return 0, fmt.Errorf("sunrpc: xprtsec %q: want none, tls or mtls", s)
}

// TLSInfo is the RPC-with-TLS session of a server connection as the
// server established it (RFC 9289 section 5.2.1).
type TLSInfo struct {
	// State is the session: version (TLS 1.3), negotiated ALPN protocol
	// ("sunrpc", or "" from a client that offered none), the client's
	// certificates and, when they verified, their chains.
	State tls.ConnectionState
	// PeerName names the client by its verified certificate: the first
	// DNS subjectAltName, else the subject's common name (subjectAltName
	// takes precedence over CN, RFC 9289 section 5.2.1). It is "" when
	// the client presented no certificate that verified.
	PeerName string
}

// Verified tells whether the client presented a certificate that verified
// against the server's ClientCAs.
func (i *TLSInfo) Verified() bool { return len(i.State.VerifiedChains) > 0 }

// Leaf returns the client's verified certificate, or nil.
func (i *TLSInfo) Leaf() *x509.Certificate {
	if !i.Verified() || len(i.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return i.State.VerifiedChains[0][0]
}

func newTLSInfo(st tls.ConnectionState) *TLSInfo {
	i := &TLSInfo{State: st}
	if leaf := i.Leaf(); leaf != nil {
		i.PeerName = certName(leaf)
	}
	return i
}

// certName is the identity of c: its first DNS subjectAltName, else its
// subject CN (RFC 9289 section 5.2.1).
func certName(c *x509.Certificate) string {
	if len(c.DNSNames) > 0 {
		return c.DNSNames[0]
	}
	return c.Subject.CommonName
}

// tlsVersionName names a negotiated TLS version for logs.
func tlsVersionName(v uint16) string {
	if v == tls.VersionTLS13 {
		return "TLS 1.3"
	}
	return fmt.Sprintf("TLS version %#04x", v)
}

// handshakeError classifies err, from a TLS handshake or the first read
// after it: a failure of the connection (closed, reset, timed out, ctx
// ended) is returned as is, so that a client tries again; anything else
// is the negotiation failing (a certificate that does not verify, an alert
// from the peer, no TLS 1.3, no common ALPN protocol, bytes that are not
// TLS) and wraps ErrTLSHandshake.
func handshakeError(peer string, err error) error {
	var ne net.Error
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("sunrpc: TLS handshake with %s: connection failed: %w", peer, err)
	}
	return fmt.Errorf("%w with %s: %w", ErrTLSHandshake, peer, err)
}
