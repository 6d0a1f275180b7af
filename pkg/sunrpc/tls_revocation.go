package sunrpc

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
	"sync"
)

// ErrRevoked is the error of a TLS handshake refused because the peer's
// certificate is on the server's RevocationList.
var ErrRevoked = errors.New("sunrpc: certificate revoked")

// RevocationList is a server's list of revoked client certificates, by
// serial number or by the name the certificate gives its holder (the
// first DNS subjectAltName, else the CN, as TLSInfo.PeerName), kept in a
// file that is read again when it changes (a ConfigMap's update is
// followed without a restart). Use VerifyConnection as
// tls.Config.VerifyConnection: it runs after the chain verified in every
// handshake, resumed sessions included (which VerifyPeerCertificate
// misses), and a certificate it refuses ends the handshake with an alert.
// Sessions already established are not ended.
//
// The file is text, one entry a line, '#' starting a comment:
//
//	serial 5f3a0c…   # a serial number in hexadecimal (colons allowed)
//	name node-7      # every certificate naming node-7
//
// Serial numbers are unique only per issuing CA: the list is meant for a
// server whose client certificates come from one CA.
type RevocationList struct {
	file string

	mu      sync.Mutex
	stamp   fileStamp
	serials map[string]bool // big.Int.Text(16)
	names   map[string]bool
}

// LoadRevocationList reads file. Errors: a file that cannot be read, a
// line that is neither a serial nor a name entry.
func LoadRevocationList(file string) (*RevocationList, error) {
	l := &RevocationList{file: file}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("sunrpc: revocation list: %w", err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("sunrpc: revocation list: %w", err)
	}
	if l.serials, l.names, err = ParseRevocationList(b); err != nil {
		return nil, fmt.Errorf("sunrpc: revocation list %s: %w", file, err)
	}
	l.stamp = fileStamp{size: fi.Size(), mtime: fi.ModTime(), ino: inode(fi)}
	return l, nil
}

// ParseRevocationList parses the text of a revocation list into the
// revoked serials (lower-case hexadecimal, no leading zeros) and names.
// Errors name the first bad line.
func ParseRevocationList(b []byte) (serials, names map[string]bool, err error) {
	serials, names = map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, nil, fmt.Errorf("line %d: want \"serial HEX\" or \"name NAME\"", n)
		}
		switch f[0] {
		case "serial":
			s, ok := new(big.Int).SetString(strings.ReplaceAll(f[1], ":", ""), 16)
			if !ok || s.Sign() < 0 {
				return nil, nil, fmt.Errorf("line %d: serial %q is not hexadecimal", n, f[1])
			}
			serials[s.Text(16)] = true
		case "name":
			names[f[1]] = true
		default:
			return nil, nil, fmt.Errorf("line %d: %q: want serial or name", n, f[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	return serials, names, nil
}

// current reads the file again when it changed. A file that cannot be
// read or parsed keeps the last list (a revocation is never dropped by a
// half-written or deleted file).
func (l *RevocationList) current() (serials, names map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fi, err := os.Stat(l.file)
	if err == nil {
		st := fileStamp{size: fi.Size(), mtime: fi.ModTime(), ino: inode(fi)}
		if st != l.stamp {
			if b, err := os.ReadFile(l.file); err == nil {
				if s, n, err := ParseRevocationList(b); err == nil {
					l.serials, l.names, l.stamp = s, n, st
				}
			}
		}
	}
	return l.serials, l.names
}

// Check returns an error wrapping ErrRevoked when c's serial or name is
// on the list.
func (l *RevocationList) Check(c *x509.Certificate) error {
	serials, names := l.current()
	if serials[c.SerialNumber.Text(16)] {
		return fmt.Errorf("%w: serial %s (%q)", ErrRevoked, c.SerialNumber.Text(16), certName(c))
	}
	if n := certName(c); names[n] {
		return fmt.Errorf("%w: name %q (serial %s)", ErrRevoked, n, c.SerialNumber.Text(16))
	}
	return nil
}

// VerifyConnection is tls.Config.VerifyConnection: it checks the leaf
// of the verified chain; a peer without a verified certificate is left
// to the configuration's ClientAuth.
func (l *RevocationList) VerifyConnection(cs tls.ConnectionState) error {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return l.Check(cs.VerifiedChains[0][0])
}
