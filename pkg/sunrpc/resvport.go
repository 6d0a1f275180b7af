package sunrpc

import (
	"context"
	"errors"
	"net"
	"syscall"
)

// Reserved (privileged) source ports, tried from MaxResvPort down, as
// Linux's RPC client takes them (sunrpc.min_resvport, max_resvport).
// Servers that trust only privileged callers (lockd's callbacks, statd's
// SM_SIMU_CRASH, exports without "insecure") check for a port below 1024.
const (
	MinResvPort = 665
	MaxResvPort = 1023
)

// DialReserved connects to addr over TCP from the local address source
// (nil: any) and a reserved port, the first free one from MaxResvPort
// down; when the process may not bind one (EACCES, EPERM) or every one is
// taken, from any port. Errors: the dial's (with a source that cannot be
// bound, EADDRNOTAVAIL).
func DialReserved(ctx context.Context, source net.IP, addr string) (net.Conn, error) {
ports:
	for p := MaxResvPort; p >= MinResvPort; p-- {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: source, Port: p}}
		c, err := d.DialContext(ctx, "tcp", addr)
		switch {
		case err == nil:
			return c, nil
		case errors.Is(err, syscall.EADDRINUSE), errors.Is(err, syscall.EADDRNOTAVAIL) && source == nil:
			continue // the port is taken: the next one
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
			break ports // no privileged port for this process
		default:
			return nil, err
		}
	}
	var la net.Addr
	if source != nil {
		la = &net.TCPAddr{IP: source}
	}
	d := net.Dialer{LocalAddr: la}
	return d.DialContext(ctx, "tcp", addr)
}
