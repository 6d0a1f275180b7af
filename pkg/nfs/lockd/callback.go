package lockd

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// RPCBindPort asks the rpcbind at host:111 (portmap v2 GETPORT over TCP)
// for the TCP port of prog/vers: the default Options.LookupPort. 0 means
// not registered.
func RPCBindPort(ctx context.Context, host string, prog, vers uint32) (int, error) {
	return sunrpc.PortmapGetPort(ctx, net.JoinHostPort(host, strconv.Itoa(sunrpc.PortmapPort)),
		sunrpc.Mapping{Prog: prog, Vers: vers, Prot: sunrpc.IPProtoTCP})
}

// call makes one call to prog/vers on host, found through LookupPort, over
// a new TCP connection; args is given the connection's local address.
func (m *Manager) call(host string, prog, vers, proc uint32, args func(b *sunrpc.Builder, local net.Addr), results func(*xdr.Decoder, int) error) error {
	ctx, cancel := context.WithTimeout(m.ctx, m.opts.CallTimeout)
	defer cancel()
	addr, err := m.port(ctx, host, prog, vers)
	if err != nil {
		return err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	local := conn.LocalAddr()
	tr := sunrpc.NewTCPTransport(conn, sunrpc.TCPOptions{Logger: m.log})
	used := false
	c, err := sunrpc.NewClient(func(context.Context) (sunrpc.ClientTransport, error) {
		if used {
			return nil, net.ErrClosed
		}
		used = true
		return tr, nil
	}, sunrpc.ClientOptions{Retry: sunrpc.RetryPolicy{Soft: true, Retries: 0}})
	if err != nil {
		tr.Close()
		return err
	}
	defer c.Close()
	return c.Call(ctx, sunrpc.CallSpec{
		Prog: prog, Vers: vers, Proc: proc,
		Args:    func(b *sunrpc.Builder) { args(b, local) },
		Results: results, MaxReplySize: 4096,
	})
}

// callGranted sends NLM GRANTED (a synchronous call, whose nlm4_res is
// the client's answer) to the NLM service of host.
func (m *Manager) callGranted(host string, args *nlm.TestArgs) (nlm.Stat, error) {
	var res nlm.Res
	err := m.call(host, nlm.Program, nlm.Version, nlm.ProcGranted,
		func(b *sunrpc.Builder, _ net.Addr) { args.Encode(&b.Encoder) },
		func(d *xdr.Decoder, _ int) error { return res.Decode(d) })
	return res.Stat, err
}

// notifyLoop sends SM_NOTIFY to client c's NSM until it answers or
// Options.NotifyFor passes, backing off from 1 s to a minute.
func (m *Manager) notifyLoop(c Client) {
	deadline := time.Now().Add(m.opts.NotifyFor)
	wait := time.Second
	for {
		err := m.notify(c)
		if err == nil {
			m.log.Info("lockd: client notified of restart (SM_NOTIFY)", "client", c.Name, "addr", c.Addr, "state", m.State())
			m.nsm.notified(c)
			return
		}
		if time.Now().Add(wait).After(deadline) {
			m.log.Warn("lockd: giving up notifying a client of the restart", "client", c.Name, "addr", c.Addr, "err", err)
			return
		}
		m.log.Info("lockd: SM_NOTIFY failed; retrying", "client", c.Name, "addr", c.Addr, "err", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, time.Minute)
	}
}

// notify sends one SM_NOTIFY (stat_chge: this server's name and new
// state) to the NSM of client c.
func (m *Manager) notify(c Client) error {
	name := m.opts.Name
	return m.call(c.Addr, nsm.Program, nsm.Version, nsm.ProcNotify,
		func(b *sunrpc.Builder, local net.Addr) {
			n := name
			if n == "" {
				n = hostOf(local)
			}
			a := nsm.StatChge{MonName: n, State: m.State()}
			a.Encode(&b.Encoder)
		}, nil)
}

// hostOf returns the IP address of a TCP address, without the port.
func hostOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort().Addr().Unmap().String()
	}
	if a == nil {
		return ""
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}
