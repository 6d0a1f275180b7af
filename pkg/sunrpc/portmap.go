package sunrpc

import (
	"context"
	"errors"
	"fmt"

	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// Portmap version 2 (RFC 1833 section 3): the protocol rpcbind answers on
// port 111 that maps (program, version, protocol) to a port.
const (
	PortmapProgram = 100000
	PortmapVersion = 2
	PortmapPort    = 111

	PortmapProcSet     = 1 // PMAPPROC_SET: mapping -> bool
	PortmapProcUnset   = 2 // PMAPPROC_UNSET: mapping -> bool
	PortmapProcGetPort = 3 // PMAPPROC_GETPORT: mapping -> unsigned int

	IPProtoTCP = 6  // IPPROTO_TCP, mapping.prot
	IPProtoUDP = 17 // IPPROTO_UDP, mapping.prot
)

// ErrPortmapRefused means rpcbind answered FALSE to PMAPPROC_SET or
// PMAPPROC_UNSET: the mapping is taken by another owner (SET), absent
// (UNSET), or the caller is not local.
var ErrPortmapRefused = errors.New("sunrpc: rpcbind refused the mapping")

// Mapping is portmap v2's mapping (RFC 1833 section 3.1): program,
// version, protocol (IPProtoTCP, IPProtoUDP) and port, 4 bytes each.
type Mapping struct {
	Prog, Vers, Prot, Port uint32
}

func (m Mapping) encode(b *Builder) {
	b.Uint32(m.Prog)
	b.Uint32(m.Vers)
	b.Uint32(m.Prot)
	b.Uint32(m.Port)
}

func portmapCall(ctx context.Context, addr string, proc uint32, m Mapping, out *uint32, opts TCPOptions) error {
	c, err := NewClient(TCPDialer(addr, opts), ClientOptions{Retry: RetryPolicy{Soft: true, Retries: 1}})
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(ctx, CallSpec{
		Prog: PortmapProgram, Vers: PortmapVersion, Proc: proc,
		Args: m.encode,
		Results: func(d *xdr.Decoder, _ int) error {
			*out = d.Uint32()
			return d.Err()
		},
		MaxReplySize: 64,
	})
}

// PortmapGetPort asks rpcbind at addr ("host:port") over TCP for the port
// of m.Prog, m.Vers over m.Prot (PMAPPROC_GETPORT, RFC 1833 section 3.2);
// 0 means not registered.
func PortmapGetPort(ctx context.Context, addr string, m Mapping) (int, error) {
	return PortmapGetPortWith(ctx, addr, m, TCPOptions{})
}

// PortmapGetPortWith is PortmapGetPort over a connection made with opts.
func PortmapGetPortWith(ctx context.Context, addr string, m Mapping, opts TCPOptions) (int, error) {
	var port uint32
	if err := portmapCall(ctx, addr, PortmapProcGetPort, m, &port, opts); err != nil {
		return 0, fmt.Errorf("sunrpc: rpcbind GETPORT %d/%d at %s: %w", m.Prog, m.Vers, addr, err)
	}
	if port > 65535 {
		return 0, fmt.Errorf("sunrpc: rpcbind GETPORT %d/%d at %s: port %d: %w", m.Prog, m.Vers, addr, port, ErrMalformed)
	}
	return int(port), nil
}

// PortmapSet registers m with rpcbind at addr (PMAPPROC_SET); rpcbind
// accepts it only from its own host. ErrPortmapRefused when it answers
// FALSE.
func PortmapSet(ctx context.Context, addr string, m Mapping) error {
	var ok uint32
	if err := portmapCall(ctx, addr, PortmapProcSet, m, &ok, TCPOptions{}); err != nil {
		return fmt.Errorf("sunrpc: rpcbind SET %d/%d at %s: %w", m.Prog, m.Vers, addr, err)
	}
	if ok != 1 {
		return fmt.Errorf("sunrpc: rpcbind SET %d/%d/%d port %d at %s: %w", m.Prog, m.Vers, m.Prot, m.Port, addr, ErrPortmapRefused)
	}
	return nil
}

// PortmapUnset removes every protocol's mapping of m.Prog, m.Vers from
// rpcbind at addr (PMAPPROC_UNSET; m.Prot and m.Port are ignored).
// ErrPortmapRefused when it answers FALSE (nothing was registered).
func PortmapUnset(ctx context.Context, addr string, m Mapping) error {
	var ok uint32
	if err := portmapCall(ctx, addr, PortmapProcUnset, m, &ok, TCPOptions{}); err != nil {
		return fmt.Errorf("sunrpc: rpcbind UNSET %d/%d at %s: %w", m.Prog, m.Vers, addr, err)
	}
	if ok != 1 {
		return fmt.Errorf("sunrpc: rpcbind UNSET %d/%d at %s: %w", m.Prog, m.Vers, addr, ErrPortmapRefused)
	}
	return nil
}
