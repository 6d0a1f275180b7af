package sunrpc

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// testPKI is a small PKI made for a test: a CA with a server certificate
// (127.0.0.1), a node's client certificate, an expired client certificate,
// and a client certificate from another CA naming the same node.
type testPKI struct {
	roots, otherRoots *x509.CertPool
	server            tls.Certificate
	node              tls.Certificate // DNS SAN "node-a"
	cnOnly            tls.Certificate // CN "node-c", no SAN
	expired           tls.Certificate // DNS SAN "node-b", expired yesterday
	stranger          tls.Certificate // DNS SAN "node-a", signed by the other CA
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serial atomic.Int64

func newTestCA(t testing.TB, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert: cert, key: key}
}

func (ca testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issue makes a leaf certificate valid from notBefore to notAfter.
func (ca testCA) issue(t testing.TB, tmpl *x509.Certificate, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	tmpl.NotBefore, tmpl.NotAfter = notBefore, notAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func newTestPKI(t testing.TB) *testPKI {
	ca, other := newTestCA(t, "cluster CA"), newTestCA(t, "another CA")
	now := time.Now()
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return &testPKI{
		roots:      ca.pool(),
		otherRoots: other.pool(),
		server: ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "export server"},
			DNSNames: []string{"nfs-server"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, now.Add(-time.Hour), now.Add(time.Hour)),
		node: ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "node-a CN"}, DNSNames: []string{"node-a"},
			ExtKeyUsage: client}, now.Add(-time.Hour), now.Add(time.Hour)),
		cnOnly: ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "node-c"}, ExtKeyUsage: client},
			now.Add(-time.Hour), now.Add(time.Hour)),
		expired: ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "node-b"}, DNSNames: []string{"node-b"},
			ExtKeyUsage: client}, now.Add(-48*time.Hour), now.Add(-24*time.Hour)),
		stranger: other.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "node-a"}, DNSNames: []string{"node-a"},
			ExtKeyUsage: client}, now.Add(-time.Hour), now.Add(time.Hour)),
	}
}

// serverOpts is a server's TCPOptions under policy, with the PKI's server
// certificate and its CA for clients.
func (p *testPKI) serverOpts(policy XprtSec, log *slog.Logger) TCPOptions {
	return TCPOptions{Logger: log, XprtSec: policy,
		TLS: &tls.Config{Certificates: []tls.Certificate{p.server}, ClientCAs: p.roots}}
}

// clientOpts is a client's TCPOptions under policy trusting the PKI's CA,
// presenting cert when not nil.
func (p *testPKI) clientOpts(policy XprtSec, cert *tls.Certificate) TCPOptions {
	cfg := &tls.Config{RootCAs: p.roots}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return TCPOptions{Logger: quiet, XprtSec: policy, TLS: cfg, ProbeProg: tlsTestProg, ProbeVers: 1}
}

const (
	tlsTestProg = 0x20000098
	procPeer    = 1 // results: bool tls, version, alpn, peer name, bool verified
)

// newTLSTestServer is newTestServer with tlsTestProg, whose procPeer tells
// what the server knows of the connection's TLS session, and an observer
// counting AUTH_TLS probes.
func newTLSTestServer(probes *atomic.Int32) *Server {
	s := newTestServer()
	s.Register(tlsTestProg, 1, []Handler{procPeer: func(ctx context.Context, req *Request, res *Builder) error {
		res.Bool(req.TLS != nil)
		if req.TLS == nil {
			return nil
		}
		res.Uint32(uint32(req.TLS.State.Version))
		res.String(req.TLS.State.NegotiatedProtocol)
		res.String(req.TLS.PeerName)
		res.Bool(req.TLS.Verified())
		return nil
	}})
	if probes != nil {
		s.SetObserver(probeCounter{probes})
	}
	return s
}

type probeCounter struct{ n *atomic.Int32 }

func (p probeCounter) ObserveCall(req *Request, _ CallStatus, _ time.Duration) {
	if req.Cred.Flavor == AuthTLS {
		p.n.Add(1)
	}
}

// peerInfo is procPeer's result.
type peerInfo struct {
	tls      bool
	version  uint16
	alpn     string
	name     string
	verified bool
}

func callPeer(ctx context.Context, c *Client) (peerInfo, error) {
	var p peerInfo
	err := c.Call(ctx, CallSpec{Prog: tlsTestProg, Vers: 1, Proc: procPeer,
		Results: func(d *xdr.Decoder, _ int) error {
			if p.tls = d.Bool(); p.tls {
				p.version = uint16(d.Uint32())
				p.alpn = d.String(64)
				p.name = d.String(256)
				p.verified = d.Bool()
			}
			return d.Err()
		}})
	return p, err
}

func newClientOpts(t testing.TB, addr string, opts TCPOptions, retry RetryPolicy) *Client {
	t.Helper()
	c, err := NewClient(TCPDialer(addr, opts), ClientOptions{Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// logTo returns a logger writing text records to b.
func logTo(b *testenv.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TLS against TLS: the probe is answered STARTTLS, TLS 1.3 and ALPN
// "sunrpc" are negotiated, and calls with small and large (several TLS
// records) DDP-eligible data go through record marking inside the session.
func TestTLSSession(t *testing.T) {
	pki := newTestPKI(t)
	var probes atomic.Int32
	var log testenv.Buffer
	addr, _ := serveTCP(t, newTLSTestServer(&probes), pki.serverOpts(XprtSecTLS, logTo(&log)))
	ctx := testenv.Context(t, 30*time.Second)

	tr, err := DialTCP(ctx, addr, pki.clientOpts(XprtSecTLS, nil))
	if err != nil {
		t.Fatal(err)
	}
	st, ok := tr.(TLSStater).TLSState()
	tr.Close()
	if !ok || st.Version != tls.VersionTLS13 || st.NegotiatedProtocol != ALPNProtocol {
		t.Fatalf("client TLS state: ok %v version %#x alpn %q", ok, st.Version, st.NegotiatedProtocol)
	}
	if len(st.PeerCertificates) == 0 || st.PeerCertificates[0].Subject.CommonName != "export server" {
		t.Fatal("client did not see the server's certificate")
	}

	c := newClientOpts(t, addr, pki.clientOpts(XprtSecTLS, &pki.node), RetryPolicy{})
	p, err := callPeer(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	// xprtsec=tls presents no client certificate, even when one is configured.
	if want := (peerInfo{tls: true, version: tls.VersionTLS13, alpn: "sunrpc"}); p != want {
		t.Fatalf("server saw %+v, want %+v", p, want)
	}
	if st, ok := c.TLSState(); !ok || st.Version != tls.VersionTLS13 {
		t.Fatalf("Client.TLSState: %v, %#x", ok, st.Version)
	}
	for _, n := range []int{5, 100, 64 << 10, 700 << 10} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + n)
		}
		got, err := echoCall(ctx, c, data)
		if err != nil {
			t.Fatalf("echo %d bytes: %v", n, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("echo %d bytes came back different", n)
		}
	}
	if n := probes.Load(); n != 2 {
		t.Fatalf("server answered %d AUTH_TLS probes, want 2 (one per connection)", n)
	}
	if !strings.Contains(log.String(), "RPC-with-TLS session") {
		t.Fatalf("server did not log the session:\n%s", log.String())
	}
}

// mtls with the node's certificate: the server's handlers see the node's
// name, from the DNS subjectAltName, else from the CN.
func TestTLSMutualNodeIdentity(t *testing.T) {
	pki := newTestPKI(t)
	addr, _ := serveTCP(t, newTLSTestServer(nil), pki.serverOpts(XprtSecMTLS, quiet))
	ctx := testenv.Context(t, 30*time.Second)
	for _, tc := range []struct {
		cert *tls.Certificate
		name string
	}{{&pki.node, "node-a"}, {&pki.cnOnly, "node-c"}} {
		c := newClientOpts(t, addr, pki.clientOpts(XprtSecMTLS, tc.cert), RetryPolicy{})
		p, err := callPeer(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if want := (peerInfo{tls: true, version: tls.VersionTLS13, alpn: "sunrpc", name: tc.name, verified: true}); p != want {
			t.Fatalf("server saw %+v, want %+v", p, want)
		}
	}
}

// serveOneTCP serves one connection with ServeTCPConn and returns its
// error on the channel.
func serveOneTCP(t *testing.T, d Dispatcher, opts TCPOptions) (string, <-chan error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	errc := make(chan error, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			errc <- err
			return
		}
		errc <- ServeTCPConn(context.Background(), conn, d, opts)
	}()
	return l.Addr().String(), errc
}

// Certificates that must not pass: the handshake fails on both sides with
// ErrTLSHandshake, the server logs it with the client's address, and a
// Client does not retry it forever.
func TestTLSHandshakeRefusals(t *testing.T) {
	pki := newTestPKI(t)
	for _, tc := range []struct {
		name       string
		server     XprtSec
		client     TCPOptions
		serverErr  func(error) bool // what the server's error must also be
		clientSide bool             // the client refuses the server (else the server refuses the client)
		serverTLS  func(*tls.Config)
	}{
		{name: "revoked client certificate", server: XprtSecMTLS, client: pki.clientOpts(XprtSecMTLS, &pki.node),
			serverTLS: func(cfg *tls.Config) { cfg.VerifyConnection = refuseSerialOf(pki.node) },
			serverErr: func(err error) bool { return strings.Contains(err.Error(), "revoked") }},
		{name: "expired client certificate", server: XprtSecMTLS, client: pki.clientOpts(XprtSecMTLS, &pki.expired),
			serverErr: func(err error) bool {
				var ie x509.CertificateInvalidError
				return errors.As(err, &ie) && ie.Reason == x509.Expired
			}},
		// crypto/tls's client holds back a certificate whose issuer is not
		// among the server's CAs; other clients present it anyway.
		{name: "client certificate of another CA", server: XprtSecMTLS, client: pki.clientOpts(XprtSecMTLS, &pki.stranger),
			serverErr: func(err error) bool { return strings.Contains(err.Error(), "didn't provide a certificate") }},
		{name: "client certificate of another CA presented anyway", server: XprtSecMTLS, client: presentAnyway(pki.clientOpts(XprtSecMTLS, nil), &pki.stranger),
			serverErr: func(err error) bool { var ue x509.UnknownAuthorityError; return errors.As(err, &ue) }},
		{name: "no client certificate for an mtls server", server: XprtSecMTLS, client: pki.clientOpts(XprtSecTLS, nil),
			serverErr: func(err error) bool { return strings.Contains(err.Error(), "didn't provide a certificate") }},
		{name: "server certificate of an unknown CA", server: XprtSecTLS, clientSide: true,
			client: TCPOptions{Logger: quiet, XprtSec: XprtSecTLS, TLS: &tls.Config{RootCAs: pki.otherRoots}},
			serverErr: func(err error) bool {
				var ne *net.OpError
				return errors.As(err, &ne) && ne.Op == "remote error"
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log testenv.Buffer
			sopts := pki.serverOpts(tc.server, logTo(&log))
			if tc.serverTLS != nil {
				tc.serverTLS(sopts.TLS)
			}
			addr, errc := serveOneTCP(t, newTLSTestServer(nil), sopts)
			ctx := testenv.Context(t, 30*time.Second)
			c := newClientOpts(t, addr, tc.client, RetryPolicy{}) // hard: retries until ctx ends, but for these
			_, err := callPeer(ctx, c)
			if !errors.Is(err, ErrTLSHandshake) || ctx.Err() != nil {
				t.Fatalf("client: %v, want ErrTLSHandshake at once", err)
			}
			if tc.clientSide {
				var ve *tls.CertificateVerificationError
				if !errors.As(err, &ve) {
					t.Fatalf("client: %v, want a *tls.CertificateVerificationError", err)
				}
			}
			serr := <-errc
			if !errors.Is(serr, ErrTLSHandshake) || !tc.serverErr(serr) {
				t.Fatalf("server: %v", serr)
			}
			if !strings.Contains(log.String(), "RPC-with-TLS handshake failed") || !strings.Contains(log.String(), "peer=127.0.0.1:") {
				t.Fatalf("server log does not tell the failure and the peer:\n%s", log.String())
			}
			if c.Stats().Reconnects != 0 {
				t.Fatalf("client reconnected %d times", c.Stats().Reconnects)
			}
		})
	}
}

// A peer failing its handshake in a loop gets one log line per
// handshakeLogInterval, not one per attempt; the next line counts the
// attempts left out.
func TestTLSHandshakeFailuresRateLimited(t *testing.T) {
	pki := newTestPKI(t)
	var log testenv.Buffer
	addr, _ := serveTCP(t, newTLSTestServer(nil), pki.serverOpts(XprtSecMTLS, logTo(&log)))
	const attempts = 5
	for i := range attempts {
		ctx := testenv.Context(t, 30*time.Second)
		c := newClientOpts(t, addr, pki.clientOpts(XprtSecMTLS, &pki.expired), RetryPolicy{})
		if _, err := callPeer(ctx, c); !errors.Is(err, ErrTLSHandshake) {
			t.Fatalf("attempt %d: %v, want ErrTLSHandshake", i, err)
		}
		c.Close()
	}
	// the server logs after the client saw the failure
	deadline := time.Now().Add(5 * time.Second)
	const line = `msg="sunrpc: RPC-with-TLS handshake failed"`
	for strings.Count(log.String(), line) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if n := strings.Count(log.String(), line); n != 1 {
		t.Fatalf("%d log lines for %d failed handshakes of one peer within %v, want 1:\n%s", n, attempts, handshakeLogInterval, log.String())
	}
}

// refuseSerialOf is a VerifyConnection refusing cert's serial number, as
// a revocation list would.
func refuseSerialOf(cert tls.Certificate) func(tls.ConnectionState) error {
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	return func(st tls.ConnectionState) error {
		if len(st.PeerCertificates) > 0 && st.PeerCertificates[0].SerialNumber.Cmp(leaf.SerialNumber) == 0 {
			return fmt.Errorf("certificate %v revoked", leaf.SerialNumber)
		}
		return nil
	}
}

// presentAnyway makes opts' client present cert whatever CAs the server
// asks for.
func presentAnyway(opts TCPOptions, cert *tls.Certificate) TCPOptions {
	opts.TLS.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	return opts
}

// xprtsec=tls against a server without TLS: the probe is denied
// AUTH_BADCRED, the dial fails with ErrTLSRefused, and no call goes out in
// plaintext.
func TestTLSRefusedByPlainServer(t *testing.T) {
	pki := newTestPKI(t)
	addr, _ := serveTCP(t, newTLSTestServer(nil), TCPOptions{})
	ctx := testenv.Context(t, 30*time.Second)

	_, err := DialTCP(ctx, addr, pki.clientOpts(XprtSecTLS, nil))
	var ae *AuthError
	if !errors.Is(err, ErrTLSRefused) || !errors.As(err, &ae) || ae.Stat != AuthBadCred {
		t.Fatalf("dial: %v, want ErrTLSRefused with AUTH_BADCRED", err)
	}
	if !strings.Contains(err.Error(), "does not do RPC-with-TLS") {
		t.Fatalf("error does not say why: %v", err)
	}

	c := newClientOpts(t, addr, pki.clientOpts(XprtSecMTLS, &pki.node), RetryPolicy{})
	if _, err := callPeer(ctx, c); !errors.Is(err, ErrTLSRefused) || ctx.Err() != nil {
		t.Fatalf("call: %v, want ErrTLSRefused at once", err)
	}
}

// A probe answered without STARTTLS (MSG_ACCEPTED, empty verifier; a
// server that ignores the flavor) is a refusal too.
func TestTLSRefusedWithoutStartTLSVerifier(t *testing.T) {
	addr := rawServer(t, func(conn net.Conn) {
		rr := recordReader{r: conn, max: DefaultMaxRecordSize}
		rec, err := rr.readRecord(nil)
		if err != nil {
			t.Errorf("server: %v", err)
			return
		}
		e := xdr.NewEncoder(nil)
		rh := acceptedReply(uint32(rec[0])<<24|uint32(rec[1])<<16|uint32(rec[2])<<8|uint32(rec[3]), Success)
		rh.Encode(e)
		w := recordWriter{conn: conn}
		w.write(&Message{Head: e.Bytes()})
		conn.Read(make([]byte, 1)) // until the client closes
	})
	_, err := DialTCP(testenv.Context(t, 30*time.Second), addr, TCPOptions{Logger: quiet, XprtSec: XprtSecTLS})
	if !errors.Is(err, ErrTLSRefused) || errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "not STARTTLS") {
		t.Fatalf("dial: %v, want ErrTLSRefused for the missing verifier", err)
	}
}

// A server requiring TLS denies a plaintext client's calls, NULL included,
// AUTH_ERROR AUTH_TOOWEAK, and logs it; a server offering TLS without
// requiring it serves both kinds of client.
func TestTLSRequiredRefusesPlaintext(t *testing.T) {
	pki := newTestPKI(t)
	ctx := testenv.Context(t, 30*time.Second)
	var log testenv.Buffer
	addr, _ := serveTCP(t, newTLSTestServer(nil), pki.serverOpts(XprtSecTLS, logTo(&log)))
	c := newClientOpts(t, addr, TCPOptions{Logger: quiet}, RetryPolicy{})
	for _, call := range []func() error{
		func() error { _, err := callPeer(ctx, c); return err },
		func() error { return c.Null(ctx, tlsTestProg, 1) },
	} {
		var ae *AuthError
		if err := call(); !errors.As(err, &ae) || ae.Stat != AuthTooWeak {
			t.Fatalf("plaintext call: %v, want AUTH_ERROR AUTH_TOOWEAK", err)
		}
	}
	if !strings.Contains(log.String(), "RPC-with-TLS is required") {
		t.Fatalf("server did not log the refusal:\n%s", log.String())
	}

	addr, _ = serveTCP(t, newTLSTestServer(nil), pki.serverOpts(XprtSecNone, quiet))
	plain := newClientOpts(t, addr, TCPOptions{Logger: quiet}, RetryPolicy{})
	if p, err := callPeer(ctx, plain); err != nil || p.tls {
		t.Fatalf("plaintext call to a server offering TLS: %+v, %v", p, err)
	}
	if _, ok := plain.TLSState(); ok {
		t.Fatal("Client.TLSState reports TLS on a plaintext connection")
	}
	secure := newClientOpts(t, addr, pki.clientOpts(XprtSecMTLS, &pki.node), RetryPolicy{})
	if p, err := callPeer(ctx, secure); err != nil || !p.tls || p.name != "node-a" {
		t.Fatalf("mtls call to a server offering TLS: %+v, %v", p, err)
	}
}

// Every reconnection redoes the probe and the handshake.
func TestTLSReconnect(t *testing.T) {
	pki := newTestPKI(t)
	var probes atomic.Int32
	addr, _ := serveTCP(t, newTLSTestServer(&probes), pki.serverOpts(XprtSecMTLS, quiet))
	proxy := testenv.NewProxy(t, addr, nil)
	ctx := testenv.Context(t, 30*time.Second)
	c := newClientOpts(t, proxy.Addr(), pki.clientOpts(XprtSecMTLS, &pki.node), RetryPolicy{})
	for i := range 3 {
		if i > 0 {
			proxy.Kill()
		}
		p, err := callPeer(ctx, c)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if !p.tls || p.name != "node-a" {
			t.Fatalf("call %d: server saw %+v", i, p)
		}
	}
	if n, r := probes.Load(), c.Stats().Reconnects; n != 3 || r != 2 {
		t.Fatalf("%d AUTH_TLS probes over %d reconnections, want 3 over 2", n, r)
	}
}

// The AUTH_TLS rules of RFC 9289 section 4.1 at the server: a probe inside
// a session, on another procedure than NULL, or with a body is denied
// AUTH_BADCRED; a probe of an unknown program still gets STARTTLS (with
// PROG_UNAVAIL), and the client proceeds.
func TestTLSProbeRules(t *testing.T) {
	pki := newTestPKI(t)
	addr, _ := serveTCP(t, newTLSTestServer(nil), pki.serverOpts(XprtSecNone, quiet))
	ctx := testenv.Context(t, 30*time.Second)

	opts := pki.clientOpts(XprtSecTLS, nil)
	opts.ProbeProg = 0x3fffffff // not registered
	tr, err := DialTCP(ctx, addr, opts)
	if err != nil {
		t.Fatalf("probe of an unknown program: %v", err)
	}
	defer tr.Close()
	for _, tc := range []struct {
		name string
		h    CallHeader
		want AuthStat
	}{
		{"probe inside the session", CallHeader{XID: 1, RPCVers: 2, Prog: testProg, Vers: 3, Cred: OpaqueAuth{Flavor: AuthTLS}}, AuthBadCred},
		{"AUTH_TLS on a procedure other than NULL", CallHeader{XID: 2, RPCVers: 2, Prog: testProg, Vers: 3, Proc: procEcho, Cred: OpaqueAuth{Flavor: AuthTLS}}, AuthBadCred},
	} {
		rh, err := rawRoundTrip(ctx, tr, encodeCall(tc.h))
		if err != nil || rh.Stat != MsgDenied || rh.Reject != RejectAuthError || rh.Auth != tc.want {
			t.Fatalf("%s: %+v, %v", tc.name, rh, err)
		}
	}

	// At the Dispatcher, where the transport offers TLS.
	s := newTLSTestServer(nil)
	for _, tc := range []struct {
		name   string
		h      CallHeader
		accept AcceptStat
		deny   AuthStat
	}{
		{"probe", CallHeader{XID: 1, RPCVers: 2, Prog: testProg, Vers: 3, Cred: OpaqueAuth{Flavor: AuthTLS}}, Success, 0},
		{"probe of an unknown program", CallHeader{XID: 2, RPCVers: 2, Prog: 7, Vers: 1, Cred: OpaqueAuth{Flavor: AuthTLS}}, ProgUnavail, 0},
		{"probe of an unknown version", CallHeader{XID: 3, RPCVers: 2, Prog: testProg, Vers: 9, Cred: OpaqueAuth{Flavor: AuthTLS}}, ProgMismatch, 0},
		{"probe with a body", CallHeader{XID: 4, RPCVers: 2, Prog: testProg, Vers: 3, Cred: OpaqueAuth{Flavor: AuthTLS, Body: []byte{0, 0, 0, 1}}}, 0, AuthBadCred},
		{"probe with a verifier", CallHeader{XID: 5, RPCVers: 2, Prog: testProg, Vers: 3, Cred: OpaqueAuth{Flavor: AuthTLS}, Verf: OpaqueAuth{Flavor: AuthSys}}, 0, AuthBadVerf},
		{"non-NULL", CallHeader{XID: 6, RPCVers: 2, Prog: testProg, Vers: 3, Proc: 1, Cred: OpaqueAuth{Flavor: AuthTLS}}, 0, AuthBadCred},
	} {
		var req Request
		req.Reset(encodeCall(tc.h), nil, nil, "tcp")
		req.offerTLS = true
		var b Builder
		if !s.Dispatch(ctx, &req, &b) {
			t.Fatalf("%s: dropped", tc.name)
		}
		rec := append([]byte(nil), b.Bytes()...)
		err := checkStartTLSReply(rec, tc.h.XID)
		rh, _ := DecodeReplyHeader(xdr.NewDecoder(rec))
		if tc.deny != 0 {
			if !errors.Is(err, ErrTLSRefused) || rh.Auth != tc.deny || req.startTLS {
				t.Fatalf("%s: %+v, %v", tc.name, rh, err)
			}
			continue
		}
		if err != nil || rh.Accept != tc.accept || !req.startTLS {
			t.Fatalf("%s: %+v, %v", tc.name, rh, err)
		}
	}
}

// A client that sends anything after its probe before the handshake (here
// its ClientHello before the STARTTLS reply) gets the reply and then the
// connection closed (RFC 9289 section 5.1.1).
func TestTLSSpuriousTrafficAfterProbe(t *testing.T) {
	pki := newTestPKI(t)
	addr, errc := serveOneTCP(t, newTLSTestServer(nil), pki.serverOpts(XprtSecTLS, quiet))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	e := xdr.NewEncoder(nil)
	binaryHeader := encodeCall(CallHeader{XID: 9, RPCVers: 2, Prog: tlsTestProg, Vers: 1, Cred: OpaqueAuth{Flavor: AuthTLS}})
	e.Uint32(lastFragment | uint32(len(binaryHeader)))
	msg := append(e.Bytes(), binaryHeader...)
	msg = append(msg, 0x16, 3, 1, 0, 4, 1, 2, 3, 4) // the start of a TLS record
	if _, err := conn.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "between the AUTH_TLS probe and the TLS handshake") {
		t.Fatalf("server: %v", err)
	}
}

// A client like Linux's (tlshd offers no ALPN) gets a session without
// ALPN; our client accepts a server that selects no ALPN protocol.
func TestTLSWithoutALPN(t *testing.T) {
	pki := newTestPKI(t)
	addr, _ := serveTCP(t, newTLSTestServer(nil), pki.serverOpts(XprtSecTLS, quiet))
	ctx := testenv.Context(t, 30*time.Second)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rec, err := setupRoundTrip(conn, &CallHeader{XID: 5, RPCVers: 2, Prog: tlsTestProg, Vers: 1, Cred: OpaqueAuth{Flavor: AuthTLS}}, false)
	if err != nil || checkStartTLSReply(rec, 5) != nil {
		t.Fatalf("probe: %v", err)
	}
	tc := tls.Client(conn, &tls.Config{RootCAs: pki.roots, ServerName: "nfs-server", MinVersion: tls.VersionTLS13})
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "" {
		t.Fatalf("ALPN %q", p)
	}
	tr := newTCPTransport(tc, conn, TCPOptions{Logger: quiet})
	defer tr.Close()
	rh, err := rawRoundTrip(ctx, tr, encodeCall(CallHeader{XID: 6, RPCVers: 2, Prog: tlsTestProg, Vers: 1}))
	if err != nil || rh.Err() != nil {
		t.Fatalf("NULL in the session: %+v, %v", rh, err)
	}
}

// NewTCPTransport does no setup: asked for TLS, it fails every call
// instead of speaking plaintext.
func TestNewTCPTransportRefusesXprtSec(t *testing.T) {
	client, _ := testenv.TCPPair(t)
	tr := NewTCPTransport(client, TCPOptions{XprtSec: XprtSecTLS})
	defer tr.Close()
	_, err := rawRoundTrip(testenv.Context(t, 30*time.Second), tr, encodeCall(CallHeader{XID: 1, RPCVers: 2}))
	if err == nil || errors.Is(err, ErrConnLost) || !strings.Contains(err.Error(), "StartTCPTransport") {
		t.Fatalf("call: %v", err)
	}
	if _, err := client.Write([]byte{0}); err == nil {
		t.Fatal("connection left open")
	}
}

// Configurations that cannot work are refused before anything is sent.
func TestTLSConfigErrors(t *testing.T) {
	pki := newTestPKI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := testenv.Context(t, 30*time.Second)
	for name, opts := range map[string]TCPOptions{
		"mtls client without a certificate": {XprtSec: XprtSecMTLS, TLS: &tls.Config{RootCAs: pki.roots}},
		"client capped at TLS 1.2":          {XprtSec: XprtSecTLS, TLS: &tls.Config{MaxVersion: tls.VersionTLS12}},
		"unknown policy":                    {XprtSec: 9},
	} {
		if _, err := DialTCP(ctx, ln.Addr().String(), opts); err == nil {
			t.Errorf("%s: dial succeeded", name)
		}
	}
	for name, opts := range map[string]TCPOptions{
		"tls server without TLS":             {XprtSec: XprtSecTLS},
		"server without a certificate":       {TLS: &tls.Config{}},
		"mtls server without client CAs":     {XprtSec: XprtSecMTLS, TLS: &tls.Config{Certificates: []tls.Certificate{pki.server}}},
		"server capped at TLS 1.2":           {TLS: &tls.Config{Certificates: []tls.Certificate{pki.server}, MaxVersion: tls.VersionTLS12}},
		"server with an unknown policy (42)": {XprtSec: 42, TLS: &tls.Config{Certificates: []tls.Certificate{pki.server}}},
	} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := ServeTCP(ctx, l, NewServer(quiet), opts); err == nil {
			t.Errorf("%s: ServeTCP returned nil", name)
		}
	}
	for _, s := range []string{"none", "tls", "mtls"} {
		if x, err := ParseXprtSec(s); err != nil || x.String() != s {
			t.Errorf("ParseXprtSec(%q) = %v, %v", s, x, err)
		}
	}
	if _, err := ParseXprtSec("krb5"); err == nil {
		t.Error("ParseXprtSec(krb5) succeeded")
	}
}

// BenchmarkTLS compares NULL calls and 1 MiB echoes (WRITE and READ sized)
// in plaintext and inside an RPC-with-TLS session.
func BenchmarkTLS(b *testing.B) {
	pki := newTestPKI(b)
	for _, sec := range []XprtSec{XprtSecNone, XprtSecTLS} {
		sopts, copts := TCPOptions{Logger: quiet}, TCPOptions{Logger: quiet}
		if sec != XprtSecNone {
			sopts, copts = pki.serverOpts(sec, quiet), pki.clientOpts(sec, nil)
		}
		addr, _ := serveTCP(b, newTestServer(), sopts)
		c := newClientOpts(b, addr, copts, RetryPolicy{})
		ctx := context.Background()
		b.Run("xprtsec="+sec.String()+"/null", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if err := c.Null(ctx, testProg, 3); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("xprtsec="+sec.String()+"/echo-1MiB", func(b *testing.B) {
			data := make([]byte, 1<<20)
			b.SetBytes(2 << 20)
			for range b.N {
				if _, err := echoCall(ctx, c, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
