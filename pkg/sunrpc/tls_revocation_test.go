package sunrpc

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

func TestParseRevocationList(t *testing.T) {
	s, n, err := ParseRevocationList([]byte("# revoked nodes\nserial 0A:ff:01  # old key of node-a\n\nname node-7\nserial 00000000000000000000000000000000000000beef\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || !s["aff01"] || !s["beef"] || len(n) != 1 || !n["node-7"] {
		t.Fatalf("serials %v, names %v", s, n)
	}
	for _, bad := range []string{"serial", "serial xyz", "serial -1", "node node-7", "name a b", "revoke node-7"} {
		if _, _, err := ParseRevocationList([]byte("name ok\n" + bad + "\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: %v, want an error naming line 2", bad, err)
		}
	}
}

// replace writes b to file through a rename, as a ConfigMap volume's
// update does.
func replace(t *testing.T, file, b string) {
	t.Helper()
	tmp := file + ".new"
	if err := os.WriteFile(tmp, []byte(b), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

// A RevocationList as the server's VerifyConnection over real sockets: a
// node certificate is accepted, then refused at the handshake once its
// serial, then its name, is listed (the file read again at each
// handshake); a list that no longer parses keeps the last one; an empty
// list accepts it again.
func TestRevocationListHandshake(t *testing.T) {
	pki := newTestPKI(t)
	leaf, err := x509.ParseCertificate(pki.node.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "revoked")
	replace(t, file, "# nothing revoked\n")
	rl, err := LoadRevocationList(file)
	if err != nil {
		t.Fatal(err)
	}
	var log testenv.Buffer
	sopts := pki.serverOpts(XprtSecMTLS, logTo(&log))
	sopts.TLS.VerifyConnection = rl.VerifyConnection
	addr, _ := serveTCP(t, newTLSTestServer(nil), sopts)
	ctx := testenv.Context(t, 60*time.Second)
	call := func() error {
		c := newClientOpts(t, addr, pki.clientOpts(XprtSecMTLS, &pki.node), RetryPolicy{})
		defer c.Close()
		p, err := callPeer(ctx, c)
		if err == nil && p.name != "node-a" {
			t.Fatalf("server saw %+v", p)
		}
		return err
	}
	refused := func(what string) {
		t.Helper()
		if err := call(); !errors.Is(err, ErrTLSHandshake) || ctx.Err() != nil {
			t.Fatalf("%s: client %v, want ErrTLSHandshake", what, err)
		}
	}
	if err := call(); err != nil {
		t.Fatalf("nothing revoked: %v", err)
	}
	replace(t, file, "serial "+leaf.SerialNumber.Text(16)+"\n")
	refused("serial revoked")
	// the server logs the failure after the client saw it
	logged := func() bool {
		return strings.Contains(log.String(), "certificate revoked: serial "+leaf.SerialNumber.Text(16))
	}
	if !testenv.WaitFor(5*time.Second, logged) {
		t.Fatalf("server log does not name the revoked serial:\n%s", log.String())
	}
	replace(t, file, "name node-a\n")
	refused("name revoked")
	replace(t, file, "name node-a\nbroken line here\n")
	refused("unparsable list (the last one kept)")
	replace(t, file, "")
	if err := call(); err != nil {
		t.Fatalf("revocation lifted: %v", err)
	}
}
