package statmon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
	"github.com/nfsrdma/nfsrdma-csi/pkg/xdr"
)

// callBack calls my_proc of id's my_prog/my_vers with st at the port the
// local rpcbind gives for it over TCP. Errors: rpcbind's, a program not
// registered, the call's.
func (m *Monitor) callBack(ctx context.Context, id nsm.MyID, st *nlm.SMStatus) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout())
	defer cancel()
	rb := m.rpcbind()
	port, err := sunrpc.PortmapGetPort(ctx, rb, sunrpc.Mapping{Prog: id.MyProg, Vers: id.MyVers, Prot: sunrpc.IPProtoTCP})
	if err == nil && port == 0 {
		err = fmt.Errorf("program %d version %d not registered over TCP at %s", id.MyProg, id.MyVers, rb)
	}
	if err != nil {
		klog.ErrorS(err, "status monitor: callback not made", "mon_name", st.MonName, "my_prog", id.MyProg, "my_vers", id.MyVers)
		return err
	}
	host, _, err := net.SplitHostPort(rb)
	if err != nil {
		return err
	}
	err = call(ctx, net.JoinHostPort(host, strconv.Itoa(port)), id.MyProg, id.MyVers, id.MyProc, st.Encode)
	if err != nil {
		klog.ErrorS(err, "status monitor: callback failed", "mon_name", st.MonName, "my_prog", id.MyProg, "my_vers", id.MyVers, "my_proc", id.MyProc, "port", port)
	}
	return err
}

// notifyPeers tells each monitored host (peers: its name, and the name
// its lock manager knows this host by) that this host's state is now
// state: SM_NOTIFY to the NSM its rpcbind gives.
func (m *Monitor) notifyPeers(ctx context.Context, peers [][2]string, state int32) {
	rbPort := m.PeerRPCBindPort
	if rbPort == 0 {
		rbPort = 111
	}
	for _, p := range peers {
		err := func() error {
			ctx, cancel := context.WithTimeout(ctx, m.timeout())
			defer cancel()
			port, err := sunrpc.PortmapGetPort(ctx, net.JoinHostPort(p[0], strconv.Itoa(rbPort)),
				sunrpc.Mapping{Prog: nsm.Program, Vers: nsm.Version, Prot: sunrpc.IPProtoTCP})
			if err == nil && port == 0 {
				err = errors.New("no NSM registered")
			}
			if err != nil {
				return err
			}
			a := nsm.StatChge{MonName: p[1], State: state}
			return call(ctx, net.JoinHostPort(p[0], strconv.Itoa(port)), nsm.Program, nsm.Version, nsm.ProcNotify, a.Encode)
		}()
		if err != nil {
			klog.ErrorS(err, "status monitor: SM_NOTIFY not sent", "host", p[0], "mon_name", p[1], "state", state)
		}
	}
}

// call makes one call of prog/vers/proc to addr with the arguments
// args writes, from a reserved port when it can bind one, retrying twice
// within ctx.
func call(ctx context.Context, addr string, prog, vers, proc uint32, args func(*xdr.Encoder)) error {
	dial := func(ctx context.Context) (sunrpc.ClientTransport, error) {
		c, err := sunrpc.DialReserved(ctx, nil, addr)
		if err != nil {
			return nil, err
		}
		return sunrpc.NewTCPTransport(c, sunrpc.TCPOptions{}), nil
	}
	c, err := sunrpc.NewClient(dial, sunrpc.ClientOptions{Retry: sunrpc.RetryPolicy{Soft: true, Retries: 2}})
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(ctx, sunrpc.CallSpec{Prog: prog, Vers: vers, Proc: proc, Args: func(b *sunrpc.Builder) { args(&b.Encoder) }})
}
