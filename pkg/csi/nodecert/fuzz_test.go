package nodecert

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
)

// FuzzDecide: spec.request is whatever a requester with the right to
// create CSRs sent; Decide and ParseRequest return an error for bytes
// that are not a node certificate request, never panic, and never
// approve a request whose CN and only DNS SAN are not the requester's
// node.
func FuzzDecide(f *testing.F) {
	f.Add(nodeRequest(f, "node-a"))
	f.Add(request(f, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "node-a"}, DNSNames: []string{"node-b"}}))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"))
	a := Approver{Username: nodeSA}
	f.Fuzz(func(t *testing.T, req []byte) {
		node, err := a.Decide(csrFrom(req, nodeSA, "node-a"))
		if err == nil && node != "node-a" {
			t.Fatalf("approved %q for a token on node-a", node)
		}
	})
}
