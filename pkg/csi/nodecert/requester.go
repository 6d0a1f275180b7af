package nodecert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/internal/atomicfile"
)

// Requester keeps a node's certificate in a file: it asks for one through
// a CSR of SignerName when it starts (the CA may have been replaced since
// the file was written: a certificate from the old one would be refused
// at every handshake until its renewal time), when the file holds none
// for the node, and again at 2/3 of the lifetime of the one it holds.
// While a request is pending, a current certificate in the file keeps
// serving.
type Requester struct {
	// Client is the API client of the node plugin's ServiceAccount, its
	// token bound to the node plugin's pod (Approver).
	Client kubernetes.Interface
	// NodeName is the name the certificate is for (the Kubernetes node
	// name, which the export server grants volumes to).
	NodeName string
	// File receives the private key and the certificate, both PEM, in one
	// file replaced whole (atomicfile), so that a reader never sees a key
	// with another key's certificate: give it as both --tls-cert and
	// --tls-key of `driver mount`.
	File string
	// Validity, if not 0, is asked for in spec.expirationSeconds (the
	// signer may give less; at least 10 minutes).
	Validity time.Duration
	// Timeout bounds the wait for one CSR to be signed (0: 15 minutes);
	// RetryInterval is the wait after a failed request (0: 30 s).
	Timeout, RetryInterval time.Duration
}

// Run keeps r.File current until ctx ends.
func (r *Requester) Run(ctx context.Context) error {
	if r.Timeout == 0 {
		r.Timeout = 15 * time.Minute
	}
	if r.RetryInterval == 0 {
		r.RetryInterval = 30 * time.Second
	}
	fresh := false // a certificate was obtained since the start
	for {
		c, err := r.Current(time.Now())
		if err != nil || !fresh {
			reason := "a new key and certificate at each start"
			if err != nil {
				reason = err.Error()
			}
			klog.InfoS("nodecert: requesting a node certificate", "node", r.NodeName, "file", r.File, "reason", reason)
			if c, err = r.Request(ctx); err == nil {
				fresh = true
			} else {
				if ctx.Err() != nil {
					return nil
				}
				klog.ErrorS(err, "nodecert: node certificate not obtained; trying again", "node", r.NodeName, "in", r.RetryInterval)
				if !sleep(ctx, r.RetryInterval) {
					return nil
				}
				continue
			}
		}
		at := RenewAt(c)
		klog.InfoS("nodecert: node certificate", "node", r.NodeName, "serial", SerialHex(c.SerialNumber),
			"notAfter", c.NotAfter.Format(time.RFC3339), "renewAt", at.Format(time.RFC3339))
		// then the top of the loop finds it due and asks again; a
		// certificate issued already due (cut short by the CA's own end)
		// is not asked for again at once
		wait := time.Until(at)
		if wait < time.Second {
			wait = r.RetryInterval
		}
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

// RenewAt returns when c is renewed: at 2/3 of its lifetime.
func RenewAt(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}

// Current returns the certificate in r.File when it is for r.NodeName,
// matches the key beside it and has not reached its renewal time at now;
// else an error saying why not.
func (r *Requester) Current(now time.Time) (*x509.Certificate, error) {
	b, err := os.ReadFile(r.File)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(b, b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.File, err)
	}
	c := pair.Leaf
	switch {
	case c.Subject.CommonName != r.NodeName || !slices.Equal(c.DNSNames, []string{r.NodeName}):
		return c, fmt.Errorf("%s: certificate names %q, not node %q", r.File, c.DNSNames, r.NodeName)
	case !now.Before(RenewAt(c)):
		return c, fmt.Errorf("%s: certificate past 2/3 of its lifetime (renew at %s, ends %s)", r.File,
			RenewAt(c).Format(time.RFC3339), c.NotAfter.Format(time.RFC3339))
	}
	return c, nil
}

// Request asks for a new certificate with a new key, waits for it (at
// most r.Timeout) and writes both to r.File. Errors: the API's, the CSR
// denied or failed (with the signer's message), a certificate that does
// not name the node or match the key, writing the file.
func (r *Requester) Request(ctx context.Context) (*x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	req, err := cert.MakeCSR(key, &pkix.Name{CommonName: r.NodeName}, []string{r.NodeName}, nil)
	if err != nil {
		return nil, fmt.Errorf("nodecert: %w", err)
	}
	var dur *time.Duration
	if r.Validity != 0 {
		dur = &r.Validity
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	name := csrGenerateName(r.NodeName) + hex.EncodeToString(suffix[:])
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	usages := []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth}
	reqName, uid, err := csr.RequestCertificateWithContext(ctx, r.Client, req, name, SignerName, dur, usages, key)
	if err != nil {
		return nil, fmt.Errorf("nodecert: %w", err)
	}
	klog.InfoS("nodecert: CSR created; waiting for it to be signed", "csr", reqName, "signer", SignerName)
	certPEM, err := csr.WaitForCertificate(ctx, r.Client, reqName, uid)
	if err != nil {
		return nil, fmt.Errorf("nodecert: CSR %s: %w", reqName, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("nodecert: CSR %s: issued certificate: %w", reqName, err)
	}
	c := pair.Leaf
	if c.Subject.CommonName != r.NodeName || !slices.Equal(c.DNSNames, []string{r.NodeName}) {
		return nil, fmt.Errorf("nodecert: CSR %s: issued certificate names %q, not node %q", reqName, c.DNSNames, r.NodeName)
	}
	if err := os.MkdirAll(filepath.Dir(r.File), 0o700); err != nil {
		return nil, fmt.Errorf("nodecert: %w", err)
	}
	if err := atomicfile.Write(r.File, bytes.Join([][]byte{keyPEM, certPEM}, nil)); err != nil {
		return nil, fmt.Errorf("nodecert: %w", err)
	}
	return c, nil
}

// SerialHex formats a certificate serial as the revocation list takes it:
// lower-case hex, no separators.
func SerialHex(s *big.Int) string { return s.Text(16) }

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
