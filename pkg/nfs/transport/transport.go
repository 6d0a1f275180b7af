// Package transport chooses and builds the NFS transport of a mount from
// its options (package mountopts): for proto=rdma the RDMA device
// (package devselect: a kernel RDMA device that reaches the server, or
// software iWARP) and an RPC-over-RDMA dialer over it (RFC 8166, RFC
// 8267); for proto=tcp nothing, the NFS client dialing TCP itself.
// MOUNT, NLM and rpcbind always go over TCP (RFC 8267 section 5.1).
package transport

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/devselect"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// LogDeviceChosen is the message of the log line that names the RDMA
// device chosen for a mount, with the keys server, provider, device,
// transport, reason and nompacrc (klog's key="value" form).
const LogDeviceChosen = "transport: RDMA device chosen"

// NFS is the transport of a mount's NFS service, what client.Options.Dial
// and client.Options.Transport take.
type NFS struct {
	// Dial dials the NFS service; nil for proto=tcp (the NFS client's
	// TCP default, to the port given or rpcbind's).
	Dial sunrpc.DialFunc
	// Name names the transport in logs: "rdma/siw" or "rdma/ibverbs";
	// "" for TCP.
	Name string
	// Device is the RDMA device chosen (proto=rdma only).
	Device devselect.Choice
}

// ForMount returns the NFS transport of a mount of server with options
// o. For proto=rdma: the device rdmadev= names ("auto", the default:
// a kernel RDMA device that reaches server when the driver is built with
// the ibverbs tag, else software iWARP), software iWARP with the MPA CRC
// off when nompacrc is given (RFC 5044 section 4.4), and an RPC-over-RDMA
// dialer to server:o.NFSPort() asking ConnCredits(o) and speaking up to
// rdmavers=; metrics, if not nil, counts its transport. For proto=tcp the
// zero NFS. Errors: an rdmadev= that names no usable device, wrapping
// mountopts.ErrBadOption and devselect's error.
func ForMount(server string, o mountopts.Options, metrics *rpcrdma.ClientMetrics) (NFS, error) {
	if o.Proto != mountopts.ProtoRDMA {
		return NFS{}, nil
	}
	dev, choice, err := devselect.SelectWith(server, o.RDMADevice, siw.Config{NoCRC: o.NoMPACRC})
	if err != nil {
		return NFS{}, fmt.Errorf("%w: rdmadev=%s: %w", mountopts.ErrBadOption, o.RDMADevice, err)
	}
	klog.InfoS(LogDeviceChosen, "server", server, "provider", choice.Provider, "device", choice.Device,
		"transport", choice.Transport, "reason", choice.Reason, "nompacrc", o.NoMPACRC)
	addr := net.JoinHostPort(server, strconv.Itoa(o.NFSPort()))
	var inline int
	if o.SendDDP {
		inline = rpcrdma.SDDPInline
	}
	dial := rpcrdma.Dialer(dev, addr, rpcrdma.ClientOptions{Credits: ConnCredits(o), Metrics: metrics, MaxVersion: o.RDMAVers, NoResponderReadChunks: o.NoRPRC,
		SendDDP: o.SendDDP, SendDDPGroups: o.SendDDPGroups, Inline: inline,
		Logger: slog.New(logr.ToSlogHandler(klog.Background()))}) // logs each connection's version
	return NFS{Dial: dial, Name: "rdma/" + choice.Provider, Device: choice}, nil
}

// DefaultCredits is the credits a proto=rdma mount asks for without
// credits= (the rpcrdma requester's default, 32).
const DefaultCredits = 32

// ConnCredits is the RPC-over-RDMA credits each of a mount's o.NConnect
// connections asks for (rdma_credit, RFC 8166 section 3.3.1): credits=
// (DefaultCredits when not given) divided among the connections, at
// least 1 each, so that a pod's connections together ask for no more than
// its grant when the grant is at least nconnect. The export server
// accounts them together anyway (a machine name's grant is shared by its
// connections); this keeps the bound with servers that do not.
func ConnCredits(o mountopts.Options) int {
	c := o.Credits
	if c <= 0 {
		c = DefaultCredits
	}
	return max(c/max(o.NConnect, 1), 1)
}

// TLSFiles are the PEM files of a mount's RPC-with-TLS (xprtsec=tls or
// mtls): CA holds the certificates of the authorities a server's
// certificate must chain to ("": the system's roots); Cert and Key the
// mount's own certificate and key, presented with xprtsec=mtls (the
// node's certificate, whose name the export server grants volumes to).
type TLSFiles struct {
	CA, Cert, Key string
}

// LogRDMANotTLS is the message of the log line a proto=rdma mount with
// xprtsec=tls or mtls writes: its NFS connection is not protected.
const LogRDMANotTLS = "transport: xprtsec applies to MOUNT and NLM only: the NFS/RDMA connection cannot run RPC-with-TLS (RFC 9289 defines it for TCP; RDMA traffic bypasses the host's TCP stack)"

// TCPForMount returns the TCP options of the mount of server with options
// o (client.Options.TCP): with xprtsec=tls or mtls an RPC-with-TLS policy
// (RFC 9289) and a TLS configuration of f's files: the roots of f.CA, the
// server's name server, and with mtls the certificate f.Cert and key
// f.Key. The zero options for xprtsec=none. Errors wrap
// mountopts.ErrBadOption: a file that cannot be read or parsed, mtls
// without a certificate, certificate files given for xprtsec=none.
func TCPForMount(server string, o mountopts.Options, f TLSFiles) (sunrpc.TCPOptions, error) {
	var t sunrpc.TCPOptions
	if o.XprtSec == "" || o.XprtSec == mountopts.XprtSecNone {
		if f != (TLSFiles{}) {
			return t, fmt.Errorf("%w: TLS files given without xprtsec=tls or mtls", mountopts.ErrBadOption)
		}
		return t, nil
	}
	sec, err := sunrpc.ParseXprtSec(o.XprtSec)
	if err != nil {
		return t, fmt.Errorf("%w: %w", mountopts.ErrBadOption, err)
	}
	cfg := &tls.Config{ServerName: server}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return t, fmt.Errorf("%w: xprtsec=%s: CA file: %w", mountopts.ErrBadOption, o.XprtSec, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return t, fmt.Errorf("%w: xprtsec=%s: CA file %s holds no PEM certificate", mountopts.ErrBadOption, o.XprtSec, f.CA)
		}
	}
	switch {
	case sec == sunrpc.XprtSecMTLS && (f.Cert == "" || f.Key == ""):
		return t, fmt.Errorf("%w: xprtsec=mtls needs the mount's certificate and key files", mountopts.ErrBadOption)
	case sec == sunrpc.XprtSecMTLS:
		// read again when renewed: each reconnection presents the
		// current certificate
		kp, err := sunrpc.LoadKeyPairFiles(f.Cert, f.Key)
		if err != nil {
			return t, fmt.Errorf("%w: xprtsec=mtls: %w", mountopts.ErrBadOption, err)
		}
		cfg.GetClientCertificate = kp.ClientCertificate
	}
	if o.Proto == mountopts.ProtoRDMA {
		klog.InfoS(LogRDMANotTLS, "server", server, "xprtsec", o.XprtSec)
	}
	t.XprtSec, t.TLS = sec, cfg
	return t, nil
}
