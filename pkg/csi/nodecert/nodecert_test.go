package nodecert

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
)

const nodeSA = "system:serviceaccount:kube-system:nfsrdma-csi-node"

// request is a PEM CSR for subject and dnsNames with a new P-256 key.
func request(t testing.TB, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cert.MakeCSRFromTemplate(key, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func nodeRequest(t testing.TB, node string) []byte {
	return request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: node}, DNSNames: []string{node}})
}

// csrFrom is a CSR of SignerName for req made by user with a token bound
// to a pod on podNode ("": a token bound to no pod).
func csrFrom(req []byte, user, podNode string) *certv1.CertificateSigningRequest {
	c := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr-1"},
		Spec: certv1.CertificateSigningRequestSpec{Request: req, SignerName: SignerName, Username: user,
			Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth}},
	}
	if podNode != "" {
		c.Spec.Extra = map[string]certv1.ExtraValue{NodeNameExtra: {podNode}}
	}
	return c
}

// Approver.Decide: only the node plugin's ServiceAccount on the node the
// CSR names, asking for a node certificate and nothing more.
func TestDecide(t *testing.T) {
	a := Approver{Username: nodeSA}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	weak, err := cert.MakeCSR(rsaKey, &pkix.Name{CommonName: "node-a"}, []string{"node-a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		csr  *certv1.CertificateSigningRequest
		want error // nil: approved for node-a
	}{
		{"own node", csrFrom(nodeRequest(t, "node-a"), nodeSA, "node-a"), nil},
		{"another node's name", csrFrom(nodeRequest(t, "node-b"), nodeSA, "node-a"), ErrWrongRequester},
		{"token bound to no pod", csrFrom(nodeRequest(t, "node-a"), nodeSA, ""), ErrWrongRequester},
		{"another ServiceAccount", csrFrom(nodeRequest(t, "node-a"), "system:serviceaccount:default:app", "node-a"), ErrWrongRequester},
		{"a user", csrFrom(nodeRequest(t, "node-a"), "alice", "node-a"), ErrWrongRequester},
		{"kubelet", csrFrom(nodeRequest(t, "node-a"), "system:node:node-a", "node-a"), ErrWrongRequester},
		{"two node extras", func() *certv1.CertificateSigningRequest {
			c := csrFrom(nodeRequest(t, "node-a"), nodeSA, "node-a")
			c.Spec.Extra[NodeNameExtra] = certv1.ExtraValue{"node-a", "node-b"}
			return c
		}(), ErrWrongRequester},
		{"another signer", func() *certv1.CertificateSigningRequest {
			c := csrFrom(nodeRequest(t, "node-a"), nodeSA, "node-a")
			c.Spec.SignerName = "kubernetes.io/kube-apiserver-client"
			return c
		}(), ErrWrongSigner},
		{"SAN other than CN", csrFrom(request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node-a"},
			DNSNames: []string{"node-b"}}), nodeSA, "node-a"), ErrBadRequest},
		{"two SANs", csrFrom(request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node-a"},
			DNSNames: []string{"node-a", "nfs-server"}}), nodeSA, "node-a"), ErrBadRequest},
		{"no SAN", csrFrom(request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node-a"}}), nodeSA, "node-a"), ErrBadRequest},
		{"IP SAN", csrFrom(request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node-a"},
			DNSNames: []string{"node-a"}, IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}}), nodeSA, "node-a"), ErrBadRequest},
		{"organization", csrFrom(request(t, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node-a",
			Organization: []string{"system:masters"}}, DNSNames: []string{"node-a"}}), nodeSA, "node-a"), ErrBadRequest},
		{"weak RSA key", csrFrom(weak, nodeSA, "node-a"), ErrBadRequest},
		{"not PEM", csrFrom([]byte("node-a"), nodeSA, "node-a"), ErrBadRequest},
		{"server auth usage", func() *certv1.CertificateSigningRequest {
			c := csrFrom(nodeRequest(t, "node-a"), nodeSA, "node-a")
			c.Spec.Usages = append(c.Spec.Usages, certv1.UsageServerAuth)
			return c
		}(), ErrBadRequest},
		{"no client auth usage", func() *certv1.CertificateSigningRequest {
			c := csrFrom(nodeRequest(t, "node-a"), nodeSA, "node-a")
			c.Spec.Usages = []certv1.KeyUsage{certv1.UsageDigitalSignature}
			return c
		}(), ErrBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, err := a.Decide(tc.csr)
			if tc.want == nil {
				if err != nil || node != "node-a" {
					t.Fatalf("Decide = %q, %v; want node-a approved", node, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decide = %q, %v; want %v", node, err, tc.want)
			}
		})
	}
	if _, err := (Approver{}).Decide(csrFrom(nodeRequest(t, "node-a"), "", "node-a")); !errors.Is(err, ErrWrongRequester) {
		t.Fatalf("an Approver without a user name approved a CSR without one: %v", err)
	}
}

func parseCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	p, _ := pem.Decode(b)
	if p == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(p.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// CA.Sign: a client certificate naming the node that verifies against the
// CA for client auth, cut to the CA's end, refused when the CA ends too
// soon.
func TestSign(t *testing.T) {
	ca, certPEM, keyPEM, err := NewCA("test CA", 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := ParseCA(certPEM, keyPEM); err != nil || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("ParseCA of NewCA's PEM: %v", err)
	}
	req, err := ParseRequest(nodeRequest(t, "node-a"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c := parseCert(t, must(ca.Sign(req, "node-a", 24*time.Hour, now)))
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("issued certificate does not verify for client auth: %v", err)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Fatal("issued certificate verifies for server auth")
	}
	if c.Subject.CommonName != "node-a" || !slices.Equal(c.DNSNames, []string{"node-a"}) || c.IsCA {
		t.Fatalf("issued CN %q, SANs %q, CA %v", c.Subject.CommonName, c.DNSNames, c.IsCA)
	}
	if d := c.NotAfter.Sub(now); d < 24*time.Hour-time.Second || d > 24*time.Hour+time.Second {
		t.Fatalf("validity %v, want 24h", d)
	}
	if r := RenewAt(c); r.Sub(c.NotBefore) != c.NotAfter.Sub(c.NotBefore)*2/3 {
		t.Fatalf("RenewAt %v, not at 2/3 of [%v, %v]", r, c.NotBefore, c.NotAfter)
	}
	// cut to the CA's end, refused within 10 minutes of it
	c = parseCert(t, must(ca.Sign(req, "node-a", 24*time.Hour, now.Add(40*time.Hour))))
	if !c.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Fatalf("NotAfter %v past the CA's %v", c.NotAfter, ca.Cert.NotAfter)
	}
	if _, err := ca.Sign(req, "node-a", 24*time.Hour, ca.Cert.NotAfter.Add(-time.Minute)); !errors.Is(err, ErrCAExpiring) {
		t.Fatalf("signing a minute before the CA's end: %v", err)
	}
	if _, err := ParseCA(must(ca.Sign(req, "node-a", time.Hour, now)), keyPEM); err == nil {
		t.Fatal("ParseCA took a leaf certificate (with another key) as a CA")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// The controller's steps on a fake API: the CA Secret made once, a node's
// CSR approved and then signed (with the validity the CSR asks for), a CSR
// for another node's name denied and never signed.
func TestControllerHandle(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	src := SecretCA{Client: cs, Namespace: "kube-system", Name: "nfsrdma-node-ca"}
	ca, err := src.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := src.Ensure(ctx); err != nil || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("Ensure made a second CA: %v", err)
	}
	sec, _ := cs.CoreV1().Secrets("kube-system").Get(ctx, "nfsrdma-node-ca", metav1.GetOptions{})
	if sec.Type != corev1.SecretTypeTLS {
		t.Fatalf("CA Secret type %q", sec.Type)
	}
	c := &Controller{Client: cs, Approver: Approver{Username: nodeSA}, CA: src, Validity: 24 * time.Hour}

	step := func(name string) *certv1.CertificateSigningRequest {
		t.Helper()
		csr, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Handle(ctx, csr); err != nil {
			t.Fatal(err)
		}
		csr, _ = cs.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		return csr
	}
	good := csrFrom(nodeRequest(t, "node-a"), nodeSA, "node-a")
	good.Name, good.Spec.ExpirationSeconds = "good", ptr.To[int32](3600)
	bad := csrFrom(nodeRequest(t, "node-b"), nodeSA, "node-a")
	bad.Name = "bad"
	for _, r := range []*certv1.CertificateSigningRequest{good, bad} {
		if _, err := cs.CertificatesV1().CertificateSigningRequests().Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if g := step("good"); !hasCondition(g, certv1.CertificateApproved) || len(g.Status.Certificate) != 0 {
		t.Fatalf("first step: conditions %+v, certificate %d bytes; want approved, not yet signed", g.Status.Conditions, len(g.Status.Certificate))
	}
	g := step("good")
	crt := parseCert(t, g.Status.Certificate)
	if crt.Subject.CommonName != "node-a" || crt.CheckSignatureFrom(ca.Cert) != nil {
		t.Fatalf("issued %q, signature: %v", crt.Subject.CommonName, crt.CheckSignatureFrom(ca.Cert))
	}
	if d := crt.NotAfter.Sub(crt.NotBefore); d > time.Hour+5*time.Minute+time.Second {
		t.Fatalf("lifetime %v, want the hour the CSR asked for", d)
	}
	if step("good").Status.Certificate == nil {
		t.Fatal("an issued CSR lost its certificate")
	}
	b := step("bad")
	if !hasCondition(b, certv1.CertificateDenied) || hasCondition(b, certv1.CertificateApproved) {
		t.Fatalf("CSR for another node's name: conditions %+v", b.Status.Conditions)
	}
	if b = step("bad"); len(b.Status.Certificate) != 0 {
		t.Fatal("a denied CSR was signed")
	}
}

// Requester.Current: a certificate in the file for the node, before 2/3
// of its life; not one for another node, past 2/3, or a missing file.
func TestRequesterCurrent(t *testing.T) {
	ca, _, _, err := NewCA("test CA", 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csrPEM, _ := cert.MakeCSR(key, &pkix.Name{CommonName: "node-a"}, []string{"node-a"}, nil)
	req, err := ParseRequest(csrPEM)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	now := time.Now()
	file := filepath.Join(t.TempDir(), "node.pem")
	r := &Requester{NodeName: "node-a", File: file}
	if _, err := r.Current(now); err == nil {
		t.Fatal("no file: current")
	}
	crtPEM := must(ca.Sign(req, "node-a", 3*time.Hour, now))
	writeFile(t, file, append(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), crtPEM...))
	c, err := r.Current(now)
	if err != nil || c.Subject.CommonName != "node-a" {
		t.Fatalf("Current: %v", err)
	}
	if _, err := r.Current(now.Add(2 * time.Hour)); err == nil {
		t.Fatal("current past 2/3 of its life")
	}
	if _, err := (&Requester{NodeName: "node-b", File: file}).Current(now); err == nil {
		t.Fatal("node-a's certificate current for node-b")
	}
}

func writeFile(t *testing.T, file string, b []byte) {
	t.Helper()
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
