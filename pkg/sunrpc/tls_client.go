package sunrpc

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// TLSStater is implemented by the client transports of this package: it
// reports the RPC-with-TLS session a transport runs over (ok false for a
// plaintext one), so that a caller can show the security actually in
// effect (RFC 9289 section 7.1).
type TLSStater interface {
	TLSState() (st tls.ConnectionState, ok bool)
}

// clientTLSConfig returns the TLS configuration of a client connection to
// serverName under o.XprtSec, nil for XprtSecNone: o.TLS cloned, TLS 1.3
// only (RFC 9289 section 5), ALPN "sunrpc", ServerName defaulting to
// serverName; with XprtSecTLS the client's certificates are dropped, with
// XprtSecMTLS one is required.
func (o *TCPOptions) clientTLSConfig(serverName string) (*tls.Config, error) {
	switch o.XprtSec {
	case XprtSecNone:
		return nil, nil
	case XprtSecTLS, XprtSecMTLS:
	default:
		return nil, fmt.Errorf("sunrpc: unknown transport security policy %v", o.XprtSec)
	}
	cfg := &tls.Config{}
	if o.TLS != nil {
		cfg = o.TLS.Clone()
	}
	if cfg.MaxVersion != 0 && cfg.MaxVersion < tls.VersionTLS13 {
		return nil, fmt.Errorf("sunrpc: xprtsec=%v: TLS configuration stops below TLS 1.3, which RPC-with-TLS requires (RFC 9289 section 5)", o.XprtSec)
	}
	cfg.MinVersion = tls.VersionTLS13
	cfg.NextProtos = []string{ALPNProtocol}
	if cfg.ServerName == "" {
		cfg.ServerName = serverName
	}
	switch o.XprtSec {
	case XprtSecTLS:
		cfg.Certificates, cfg.GetClientCertificate = nil, nil
	case XprtSecMTLS:
		if len(cfg.Certificates) == 0 && cfg.GetClientCertificate == nil {
			return nil, fmt.Errorf("sunrpc: xprtsec=mtls without a client certificate (TCPOptions.TLS.Certificates)")
		}
	}
	return cfg, nil
}

// aLongTimeAgo is a deadline in the past, to interrupt blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)

// clientStartTLS runs RPC-with-TLS's connection setup on conn (RFC 9289
// sections 4.1 and 5.1.1), bounded by ctx: the AUTH_TLS probe, the TLS 1.3
// handshake, then one NULL call inside the session, so that a server that
// refuses the client's certificate (TLS 1.3 tells the client so only after
// the client's side of the handshake ended) fails the setup rather than the
// first call. Errors: ErrTLSRefused, ErrTLSHandshake, ErrMalformed, or the
// connection's failure.
func clientStartTLS(ctx context.Context, conn net.Conn, cfg *tls.Config, opts *TCPOptions) (*tls.Conn, error) {
	peer := conn.RemoteAddr().String()
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return nil, err
		}
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(aLongTimeAgo) })
	defer stop()

	xid := rand.Uint32()
	probe := CallHeader{XID: xid, RPCVers: RPCVersion, Prog: opts.ProbeProg, Vers: opts.ProbeVers, Cred: OpaqueAuth{Flavor: AuthTLS}}
	rec, err := setupRoundTrip(conn, &probe, false)
	if err != nil {
		return nil, fmt.Errorf("sunrpc: AUTH_TLS probe to %s: %w", peer, err)
	}
	if err := checkStartTLSReply(rec, xid); err != nil {
		return nil, fmt.Errorf("sunrpc: %s: %w", peer, err)
	}

	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, handshakeError(peer, err)
	}
	st := tc.ConnectionState()
	// RFC 9289 section 5: TLS 1.3 (MinVersion holds it) and ALPN
	// "sunrpc". crypto/tls fails a server that selects another protocol;
	// one that selects none is taken, as Linux's tlshd, the handshake
	// agent of Linux's RPC-with-TLS, negotiates no ALPN.
	if st.Version != tls.VersionTLS13 {
		return nil, fmt.Errorf("%w with %s: negotiated %s", ErrTLSHandshake, peer, tlsVersionName(st.Version))
	}

	null := CallHeader{XID: xid + 1, RPCVers: RPCVersion, Prog: opts.ProbeProg, Vers: opts.ProbeVers}
	rec, err = setupRoundTrip(tc, &null, true)
	if err == nil {
		err = checkReplyXID(rec, null.XID)
	}
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrRecordTooLarge) {
			err = handshakeError(peer, err)
		}
		return nil, fmt.Errorf("sunrpc: first call in TLS session with %s: %w", peer, err)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	server := ""
	if len(st.PeerCertificates) > 0 {
		server = certName(st.PeerCertificates[0])
	}
	opts.logger().Info("sunrpc: RPC-with-TLS session", "peer", peer, "xprtsec", opts.XprtSec,
		"version", tlsVersionName(st.Version), "alpn", st.NegotiatedProtocol, "server_cert", server)
	return tc, nil
}

// setupRoundTrip sends the bodiless call h as one record on conn and reads
// one record back (at most peekLen bytes: a reply header with the largest
// verifier and no results).
func setupRoundTrip(conn net.Conn, h *CallHeader, coalesce bool) ([]byte, error) {
	e := xdr.NewEncoder(make([]byte, 0, 64))
	h.Encode(e)
	w := recordWriter{conn: conn, coalesce: coalesce}
	if _, err := w.write(&Message{Head: e.Bytes()}); err != nil {
		return nil, err
	}
	rr := recordReader{r: conn, max: peekLen}
	rec, err := rr.readRecord(nil)
	if err != nil {
		return nil, inFragment(err)
	}
	return rec, nil
}

// checkStartTLSReply checks rec, the reply to the AUTH_TLS probe xid: the
// client starts TLS on a reply MSG_ACCEPTED with an AUTH_NONE verifier
// whose body is "STARTTLS", whatever its accept_stat (RFC 9289 section
// 4.1). Errors: ErrMalformed (not a reply, another XID); otherwise
// ErrTLSRefused, wrapping the reply's *AuthError when the server denied the
// probe (AUTH_BADCRED from a server that does not know AUTH_TLS).
func checkStartTLSReply(rec []byte, xid uint32) error {
	var d xdr.Decoder
	d.Reset(rec)
	h, err := DecodeReplyHeader(&d)
	if err != nil {
		return fmt.Errorf("reply to AUTH_TLS probe: %w", err)
	}
	if h.XID != xid {
		return fmt.Errorf("%w: reply xid %#x to AUTH_TLS probe xid %#x", ErrMalformed, h.XID, xid)
	}
	if h.Stat != MsgAccepted {
		return fmt.Errorf("%w: AUTH_TLS probe denied (the server does not do RPC-with-TLS, RFC 9289 section 4.1): %w", ErrTLSRefused, h.Err())
	}
	if h.Verf.Flavor != AuthNone || !bytes.Equal(h.Verf.Body, startTLSVerifier[:]) {
		return fmt.Errorf("%w: AUTH_TLS probe answered %v with a %v verifier of %d bytes, not STARTTLS (RFC 9289 section 4.1)",
			ErrTLSRefused, h.Accept, h.Verf.Flavor, len(h.Verf.Body))
	}
	return nil
}

// checkReplyXID checks that rec is a reply header with XID xid.
func checkReplyXID(rec []byte, xid uint32) error {
	var d xdr.Decoder
	d.Reset(rec)
	h, err := DecodeReplyHeader(&d)
	if err != nil {
		return err
	}
	if h.XID != xid {
		return fmt.Errorf("%w: reply xid %#x to xid %#x", ErrMalformed, h.XID, xid)
	}
	return nil
}
