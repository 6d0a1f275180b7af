package sunrpc

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// KeyPairFiles is a certificate and its key in PEM files that are read
// again when they change, so that a rotated certificate (a renewed
// Kubernetes Secret, a certificate agent's output) is presented from the
// next TLS handshake without a restart. Each handshake stats the two
// files; a pair that fails to load (half written) keeps the last good
// one. Use Certificate as tls.Config.GetCertificate (a server) and
// ClientCertificate as tls.Config.GetClientCertificate (a client).
type KeyPairFiles struct {
	cert, key string

	mu    sync.Mutex
	stamp [2]fileStamp
	pair  *tls.Certificate
}

type fileStamp struct {
	size  int64
	mtime time.Time
	ino   uint64
}

// LoadKeyPairFiles loads the certificate in certFile and its key in
// keyFile; an error when they cannot be read or do not match.
func LoadKeyPairFiles(certFile, keyFile string) (*KeyPairFiles, error) {
	k := &KeyPairFiles{cert: certFile, key: keyFile}
	st, err := k.stamps()
	if err != nil {
		return nil, err
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("sunrpc: certificate %s, key %s: %w", certFile, keyFile, err)
	}
	k.stamp, k.pair = st, &pair
	return k, nil
}

func (k *KeyPairFiles) stamps() ([2]fileStamp, error) {
	var st [2]fileStamp
	for i, f := range []string{k.cert, k.key} {
		fi, err := os.Stat(f)
		if err != nil {
			return st, fmt.Errorf("sunrpc: %w", err)
		}
		st[i] = fileStamp{size: fi.Size(), mtime: fi.ModTime(), ino: inode(fi)}
	}
	return st, nil
}

// current returns the pair, loaded again when a file changed.
func (k *KeyPairFiles) current() *tls.Certificate {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, err := k.stamps()
	if err != nil || st == k.stamp {
		return k.pair
	}
	pair, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		return k.pair // half written: the next handshake tries again
	}
	k.stamp, k.pair = st, &pair
	return k.pair
}

// Certificate is tls.Config.GetCertificate.
func (k *KeyPairFiles) Certificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.current(), nil
}

// ClientCertificate is tls.Config.GetClientCertificate: the pair is
// presented whatever authorities the server names, so that a server that
// does not trust it refuses it rather than seeing no certificate.
func (k *KeyPairFiles) ClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.current(), nil
}

// inode returns fi's inode number (0 where the system gives none).
func inode(fi os.FileInfo) uint64 {
	if s, ok := fi.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}
