package nodecert

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"

	certv1 "k8s.io/api/certificates/v1"
)

// Approver decides which CSRs of SignerName the controller approves.
//
// The check is the requester's identity as the API server recorded it in
// the CSR (spec.username and spec.extra, which a client cannot set): the
// CSR must come from the node plugin's ServiceAccount (Username, e.g.
// ServiceAccountUser("kube-system", "nfsrdma-csi-node")) with a token
// bound to a pod, whose node the API server stamps into the extra
// NodeNameExtra; the name the CSR asks for must be that node's. A node
// plugin's token is bound to its own pod on its own node, so a node can
// ask only for its own name: asking for another's gives a CSR whose
// NodeNameExtra names the asking node, which is denied. A token that is
// not bound to a pod (a legacy Secret token, a TokenRequest without a
// pod) has no NodeNameExtra and gets nothing.
type Approver struct {
	// Username is the user name of the node plugin's ServiceAccount.
	Username string
}

// Decision errors: a CSR Decide refuses wraps one of them.
var (
	ErrWrongSigner    = errors.New("nodecert: not this signer's CSR")
	ErrWrongRequester = errors.New("nodecert: requester is not the node plugin's ServiceAccount on the node named")
	ErrBadRequest     = errors.New("nodecert: certificate request does not fit a node certificate")
)

// Decide returns the node the CSR names when it may be approved, else an
// error wrapping ErrWrongSigner (another signer's CSR: leave it alone),
// ErrWrongRequester or ErrBadRequest (deny it), saying why.
func (a Approver) Decide(csr *certv1.CertificateSigningRequest) (node string, err error) {
	if csr.Spec.SignerName != SignerName {
		return "", fmt.Errorf("%w: signerName %q", ErrWrongSigner, csr.Spec.SignerName)
	}
	req, err := ParseRequest(csr.Spec.Request)
	if err != nil {
		return "", err
	}
	node = req.Subject.CommonName
	if a.Username == "" || csr.Spec.Username != a.Username {
		return "", fmt.Errorf("%w: requested by %q, not %q", ErrWrongRequester, csr.Spec.Username, a.Username)
	}
	if nodes := csr.Spec.Extra[NodeNameExtra]; len(nodes) != 1 || nodes[0] != node {
		return "", fmt.Errorf("%w: asks for %q, requester's token is bound to a pod on %q", ErrWrongRequester, node, []string(csr.Spec.Extra[NodeNameExtra]))
	}
	if err := checkUsages(csr.Spec.Usages); err != nil {
		return "", err
	}
	return node, nil
}

// ParseRequest decodes a PEM "CERTIFICATE REQUEST" (spec.request) and
// checks that it fits a node certificate: signed by its key (ECDSA P-256
// or P-384, or RSA of 2048 bits or more), subject holding only a CN, the
// node name, and one DNS subjectAltName equal to it, nothing else asked
// for. Errors wrap ErrBadRequest.
func ParseRequest(pemBytes []byte) (*x509.CertificateRequest, error) {
	b, rest := pem.Decode(pemBytes)
	if b == nil || b.Type != "CERTIFICATE REQUEST" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%w: spec.request is not one PEM CERTIFICATE REQUEST", ErrBadRequest)
	}
	req, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	switch k := req.PublicKey.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return nil, fmt.Errorf("%w: ECDSA curve %s (want P-256 or P-384)", ErrBadRequest, k.Curve.Params().Name)
		}
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("%w: RSA key of %d bits (want 2048 or more)", ErrBadRequest, k.N.BitLen())
		}
	default:
		return nil, fmt.Errorf("%w: key type %T", ErrBadRequest, req.PublicKey)
	}
	s := req.Subject
	node := s.CommonName
	switch {
	case node == "":
		return nil, fmt.Errorf("%w: no subject CN (the node name)", ErrBadRequest)
	case len(s.Country)+len(s.Organization)+len(s.OrganizationalUnit)+len(s.Locality)+len(s.Province)+
		len(s.StreetAddress)+len(s.PostalCode)+len(s.ExtraNames) != 0 || s.SerialNumber != "":
		return nil, fmt.Errorf("%w: subject %q holds more than a CN", ErrBadRequest, s.String())
	case !slices.Equal(req.DNSNames, []string{node}):
		return nil, fmt.Errorf("%w: DNS subjectAltNames %q, want exactly the CN %q", ErrBadRequest, req.DNSNames, node)
	case len(req.IPAddresses)+len(req.URIs)+len(req.EmailAddresses) != 0:
		return nil, fmt.Errorf("%w: asks for IP, URI or e-mail subjectAltNames", ErrBadRequest)
	}
	for _, e := range req.Extensions {
		// subjectAltName (2.5.29.17) is read above; no other extension
		// (basic constraints, key usages) may be asked for
		if !e.Id.Equal([]int{2, 5, 29, 17}) {
			return nil, fmt.Errorf("%w: asks for extension %v", ErrBadRequest, e.Id)
		}
	}
	return req, nil
}

// checkUsages accepts usages that include "client auth" and are among
// "client auth", "digital signature" and "key encipherment".
func checkUsages(us []certv1.KeyUsage) error {
	client := false
	for _, u := range us {
		switch u {
		case certv1.UsageClientAuth:
			client = true
		case certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment:
		default:
			return fmt.Errorf("%w: usage %q (a node certificate is for client auth only)", ErrBadRequest, u)
		}
	}
	if !client {
		return fmt.Errorf("%w: usages %q lack %q", ErrBadRequest, us, certv1.UsageClientAuth)
	}
	return nil
}
