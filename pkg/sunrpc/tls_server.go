package sunrpc

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/lograte"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// serverTLS is a server's RPC-with-TLS setup.
type serverTLS struct {
	cfg      *tls.Config
	policy   XprtSec
	required bool // plaintext calls are denied
	// failures bounds the log lines of failed handshakes: one per peer
	// address every handshakeLogInterval, so that a peer failing in a
	// loop cannot flood the log
	failures *lograte.Limiter
}

// handshakeLogInterval is the least time between two log lines of one
// peer address's failed handshakes.
const handshakeLogInterval = 10 * time.Second

// serverTLS checks o's RPC-with-TLS settings and returns the server's
// setup, nil when the server does not offer TLS.
func (o *TCPOptions) serverTLS() (*serverTLS, error) {
	if o.XprtSec > XprtSecMTLS {
		return nil, fmt.Errorf("sunrpc: unknown transport security policy %v", o.XprtSec)
	}
	if o.TLS == nil {
		if o.XprtSec != XprtSecNone {
			return nil, fmt.Errorf("sunrpc: xprtsec=%v without a TLS configuration (TCPOptions.TLS)", o.XprtSec)
		}
		return nil, nil
	}
	cfg := o.TLS.Clone()
	if len(cfg.Certificates) == 0 && cfg.GetCertificate == nil && cfg.GetConfigForClient == nil {
		return nil, errors.New("sunrpc: RPC-with-TLS server without a certificate (TCPOptions.TLS.Certificates)")
	}
	if o.XprtSec == XprtSecMTLS && cfg.ClientCAs == nil && cfg.GetConfigForClient == nil {
		return nil, errors.New("sunrpc: xprtsec=mtls server without the authorities of client certificates (TCPOptions.TLS.ClientCAs)")
	}
	if err := hardenServerConfig(cfg, o.XprtSec); err != nil {
		return nil, err
	}
	if get := cfg.GetConfigForClient; get != nil {
		policy := o.XprtSec
		cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := get(hello)
			if err != nil || c == nil {
				return c, err
			}
			c = c.Clone()
			if err := hardenServerConfig(c, policy); err != nil {
				return nil, err
			}
			return c, nil
		}
	}
	return &serverTLS{cfg: cfg, policy: o.XprtSec, required: o.XprtSec != XprtSecNone,
		failures: &lograte.Limiter{Interval: handshakeLogInterval, MaxKeys: 4096}}, nil
}

// hardenServerConfig sets what RFC 9289 section 5 requires over cfg: TLS
// 1.3 only, ALPN "sunrpc"; and what the policy says of clients'
// certificates: requested, and verified when given (section 4.2: a server
// requests a peer identity from every client), when cfg has ClientCAs and
// says nothing else; required and verified for XprtSecMTLS.
func hardenServerConfig(cfg *tls.Config, policy XprtSec) error {
	if cfg.MaxVersion != 0 && cfg.MaxVersion < tls.VersionTLS13 {
		return errors.New("sunrpc: TLS configuration stops below TLS 1.3, which RPC-with-TLS requires (RFC 9289 section 5)")
	}
	cfg.MinVersion = tls.VersionTLS13
	cfg.NextProtos = []string{ALPNProtocol}
	switch {
	case policy == XprtSecMTLS:
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	case cfg.ClientAuth == tls.NoClientCert && cfg.ClientCAs != nil:
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return nil
}

// isTLSProbe tells whether rec is a call with an AUTH_TLS credential: its
// msg_type (word 1) is CALL and its credential's flavor (word 6) is
// AUTH_TLS (RFC 5531 section 9). The rest is the Dispatcher's to check.
func isTLSProbe(rec []byte) bool {
	return len(rec) >= 28 && MsgType(binary.BigEndian.Uint32(rec[4:])) == MsgCall &&
		AuthFlavor(binary.BigEndian.Uint32(rec[24:])) == AuthTLS
}

// startTLS runs the server side of the TLS handshake once the STARTTLS
// reply went out, and switches the connection's reads and writes to the
// session. Bytes the client sent after its probe and before the handshake
// end the connection (RFC 9289 section 5.1.1: such traffic is discarded
// and the connection dropped). A failed handshake is logged with the
// peer's address, at most once per address every handshakeLogInterval.
func (s *tcpServerConn) startTLS(ctx context.Context) error {
	if n := s.br.Buffered(); n > 0 {
		err := fmt.Errorf("%w: %d bytes between the AUTH_TLS probe and the TLS handshake (RFC 9289 section 5.1.1)", ErrMalformed, n)
		s.log.Warn("sunrpc: closing tcp connection", "peer", s.peer, "err", err)
		return err
	}
	hctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
	defer cancel()
	tc := tls.Server(s.conn, s.sec.cfg)
	if err := tc.HandshakeContext(hctx); err != nil {
		err = handshakeError(s.peer.String(), err)
		if ctx.Err() == nil {
			host := s.peer.String()
			if h, _, serr := net.SplitHostPort(host); serr == nil {
				host = h
			}
			if ok, skipped := s.sec.failures.Allow(host); ok {
				s.log.Warn("sunrpc: RPC-with-TLS handshake failed", "peer", s.peer, "xprtsec", s.sec.policy, "err", err, "notLoggedSince", skipped)
			}
			s.linger()
		}
		return err
	}
	info := newTLSInfo(tc.ConnectionState())
	s.log.Info("sunrpc: RPC-with-TLS session", "peer", s.peer, "client", info.PeerName, "verified", info.Verified(),
		"version", tlsVersionName(info.State.Version), "alpn", info.State.NegotiatedProtocol)
	s.tls = info
	s.br.Reset(tc)
	s.wmu.Lock()
	s.w = recordWriter{conn: tc, coalesce: true}
	s.wmu.Unlock()
	return nil
}

// lingerTime bounds how long a server reads what a client still sends
// after a failed handshake.
const lingerTime = 2 * time.Second

// linger half-closes the connection and reads what the client still sends
// for a while, so that closing does not reset the connection before the
// client read the server's alert (in TLS 1.3 a client whose certificate is
// refused learns it after its side of the handshake ended, when it has
// already sent its first call).
func (s *tcpServerConn) linger() {
	if cw, ok := s.conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = s.conn.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.Copy(io.Discard, io.LimitReader(s.conn, 1<<16))
}

// refuse answers c, a call on a plaintext connection of a server that
// requires TLS, MSG_DENIED AUTH_ERROR AUTH_TOOWEAK. A record that is not a
// call gets no reply, as Server.Dispatch drops it.
func (s *tcpServerConn) refuse(c *serverCall) {
	var d xdr.Decoder
	d.Reset(c.rec)
	h, err := DecodeCallHeader(&d)
	var ae *AuthError
	var me *MismatchError
	if err == nil || errors.As(err, &ae) || errors.As(err, &me) {
		if !s.refused {
			s.refused = true
			s.log.Warn("sunrpc: denying plaintext calls AUTH_TOOWEAK: RPC-with-TLS is required", "peer", s.peer,
				"xprtsec", s.sec.policy, "prog", h.Prog, "vers", h.Vers, "proc", h.Proc)
		}
		c.b.Reset(c.b.Bytes())
		rh := ReplyHeader{XID: h.XID, Stat: MsgDenied, Reject: RejectAuthError, Auth: AuthTooWeak}
		rh.Encode(&c.b.Encoder)
		m := c.b.Message()
		s.send(&m)
	}
	c.b.RunAfterSend()
	c.req.Reset(nil, nil, nil, "")
	serverCallPool.Put(c)
}
