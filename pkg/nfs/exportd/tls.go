package exportd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// LoadTLS returns the RPC-with-TLS configuration of an export server
// (Config.TLS) from PEM files: its certificate and key (read again when
// they change, sunrpc.KeyPairFiles), and clientCA, the
// authorities of the nodes' certificates ("": clients' certificates are
// not asked for, so no node is known by name), and revoked, a
// sunrpc.RevocationList file of the nodes' certificates refused at the
// handshake ("": none; read again when it changes). Errors: a file that
// cannot be read or parsed, a revocation list without clientCA.
func LoadTLS(certFile, keyFile, clientCA, revoked string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("RPC-with-TLS needs --tls-cert and --tls-key")
	}
	kp, err := sunrpc.LoadKeyPairFiles(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	// the files are read again when renewed (a Secret's update), from
	// the next handshake
	cfg := &tls.Config{GetCertificate: kp.Certificate, MinVersion: tls.VersionTLS13}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		cfg.ClientCAs = x509.NewCertPool()
		if !cfg.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA file %s holds no PEM certificate", clientCA)
		}
	}
	if revoked != "" {
		if clientCA == "" {
			return nil, errors.New("a revocation list needs the client CA: only verified certificates are checked against it")
		}
		rl, err := sunrpc.LoadRevocationList(revoked)
		if err != nil {
			return nil, err
		}
		cfg.VerifyConnection = rl.VerifyConnection
	}
	return cfg, nil
}
