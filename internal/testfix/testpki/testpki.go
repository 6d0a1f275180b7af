// Package testpki is a certificate authority for tests: ECDSA P-256 keys,
// X.509 certificates, all written as PEM files for the components that
// read them (our export server and mounts, Linux's tlshd).
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority whose files are written in a directory.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// File is the CA certificate's PEM file (DIR/NAME-ca.pem).
	File string
	dir  string
}

// New makes a CA named name (its CN), valid from an hour ago for a day,
// writing its certificate and those it issues in dir.
func New(t testing.TB, dir, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	c := &CA{Cert: cert, Key: key, File: filepath.Join(dir, name+"-ca.pem"), dir: dir}
	WritePEM(t, c.File, "CERTIFICATE", der)
	return c
}

// Issue writes a certificate for name (its CN and DNS subjectAltName; ips
// its IP subjectAltNames) with the extended key usage usage, valid from
// notBefore to notAfter, and its key (PKCS #8); it returns the two PEM
// files.
func (c *CA) Issue(t testing.TB, name string, ips []net.IP, usage x509.ExtKeyUsage, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name}, IPAddresses: ips,
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.Key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(c.dir, name+"-"+serial.String())
	WritePEM(t, base+".pem", "CERTIFICATE", der)
	WritePEM(t, base+"-key.pem", "PRIVATE KEY", kder)
	return base + ".pem", base + "-key.pem"
}

// WritePEM writes der as one PEM block of type typ to file (mode 0600).
func WritePEM(t testing.TB, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
