package exportd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// LoadTLS returns the RPC-with-TLS configuration of an export server
// (Config.TLS) from PEM files: its certificate and key, and clientCA, the
// authorities of the nodes' certificates ("": clients' certificates are
// not asked for, so no node is known by name). Errors: a file that
// cannot be read or parsed.
func LoadTLS(certFile, keyFile, clientCA string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("RPC-with-TLS needs --tls-cert and --tls-key")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server certificate %s, key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
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
	return cfg, nil
}
