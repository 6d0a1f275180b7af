package mounter

import (
	"slices"
	"testing"
)

// The node's RPC-with-TLS files go to the mounts that ask for TLS: the CA
// with xprtsec=tls, the CA and the node's certificate with xprtsec=mtls.
func TestTLSArgs(t *testing.T) {
	s := &Server{TLSCA: "/ca.pem", TLSCert: "/node.pem", TLSKey: "/node.pem"}
	for _, tc := range []struct {
		opts string
		want []string
	}{
		{"", nil},
		{"proto=tcp,xprtsec=none", nil},
		{"proto=tcp,xprtsec=tls", []string{"--tls-ca=/ca.pem"}},
		{"proto=tcp,xprtsec=mtls", []string{"--tls-cert=/node.pem", "--tls-key=/node.pem", "--tls-ca=/ca.pem"}},
		{"xprtsec=mtls,nosuchoption", nil},
	} {
		if got := s.tlsArgs(tc.opts); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.opts, got, tc.want)
		}
	}
	if got := (&Server{}).tlsArgs("xprtsec=mtls"); got != nil {
		t.Errorf("no files: %q", got)
	}
}
