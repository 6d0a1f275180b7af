package nodecert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// CA is the authority that signs the nodes' certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// PEM is Cert in PEM, what a server is given as its client CA.
	PEM []byte
}

// ParseCA reads a CA from PEM: the certificate (the first CERTIFICATE
// block of certPEM, a CA certificate able to sign certificates) and its
// private key (PKCS #8, PKCS #1 or SEC 1). Errors: unreadable PEM, a key
// that does not match, a certificate that is not a CA.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("nodecert: CA: %w", err)
	}
	cert := pair.Leaf
	if cert == nil {
		if cert, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("nodecert: CA: %w", err)
		}
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("nodecert: CA: certificate %q is not a CA allowed to sign certificates", cert.Subject.String())
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("nodecert: CA: key type %T cannot sign", pair.PrivateKey)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}, nil
}

// NewCA makes a self-signed CA (ECDSA P-256) named name, valid from now
// for validity, and returns it with its certificate and key in PEM.
func NewCA(name string, validity time.Duration) (ca *CA, certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-5 * time.Minute), NotAfter: now.Add(validity),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	ca, err = ParseCA(certPEM, keyPEM)
	return ca, certPEM, keyPEM, err
}

// minValidity is the shortest certificate the API allows a CSR to ask for
// (spec.expirationSeconds, 600).
const minValidity = 10 * time.Minute

// ErrCAExpiring: the CA's own certificate ends before a node certificate
// of the least validity could.
var ErrCAExpiring = errors.New("nodecert: CA certificate expires too soon to sign")

// Sign issues the node certificate of req (a request ParseRequest
// accepted), valid from now (back-dated 5 minutes for clocks behind) for
// validity, cut to the CA's own NotAfter: subject CN and DNS
// subjectAltName node, key usage digital signature, extended key usage
// client auth, a random 128-bit serial. It returns the certificate in
// PEM. Errors: ErrCAExpiring, the signing's.
func (ca *CA) Sign(req *x509.CertificateRequest, node string, validity time.Duration, now time.Time) ([]byte, error) {
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	if notAfter.Sub(now) < minValidity {
		return nil, fmt.Errorf("%w: CA %q ends at %s", ErrCAExpiring, ca.Cert.Subject.CommonName, ca.Cert.NotAfter.Format(time.RFC3339))
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: node}, DNSNames: []string{node},
		NotBefore: now.Add(-5 * time.Minute), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, req.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("nodecert: sign %q: %w", node, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// newSerial returns a random positive 128-bit serial number.
func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}
