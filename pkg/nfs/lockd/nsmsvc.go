package lockd

import (
	"context"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// NSMHandlers returns the procedures of NSM version 1, for
// sunrpc.Server.Register(nsm.Program, nsm.Version, ...). This server's
// status monitor serves its own lock manager only: SM_STAT answers
// stat_succ with its state number; SM_MON (monitoring for another
// program) answers stat_fail; SM_UNMON and SM_UNMON_ALL answer the state;
// SM_SIMU_CRASH does nothing; SM_NOTIFY from a client that restarted
// releases that client's locks (when sent from the client's recorded
// address).
func (m *Manager) NSMHandlers() []sunrpc.Handler {
	p := make([]sunrpc.Handler, nsm.NumProcs)
	p[nsm.ProcNull] = func(context.Context, *sunrpc.Request, *sunrpc.Builder) error { return nil }
	p[nsm.ProcStat] = func(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
		var a nsm.SMName
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		r := nsm.StatRes{Res: nsm.StatSucc, State: m.State()}
		r.Encode(&b.Encoder)
		return nil
	}
	p[nsm.ProcMon] = func(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
		var a nsm.Mon
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		r := nsm.StatRes{Res: nsm.StatFail, State: m.State()}
		r.Encode(&b.Encoder)
		return nil
	}
	p[nsm.ProcUnmon] = func(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
		var a nsm.MonID
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		r := nsm.Stat{State: m.State()}
		r.Encode(&b.Encoder)
		return nil
	}
	p[nsm.ProcUnmonAll] = func(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
		var a nsm.MyID
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		r := nsm.Stat{State: m.State()}
		r.Encode(&b.Encoder)
		return nil
	}
	p[nsm.ProcSimuCrash] = func(context.Context, *sunrpc.Request, *sunrpc.Builder) error { return nil }
	p[nsm.ProcNotify] = func(_ context.Context, req *sunrpc.Request, _ *sunrpc.Builder) error {
		var a nsm.StatChge
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		n := m.Rebooted(a.MonName, hostOf(req.Peer))
		m.log.Info("lockd: SM_NOTIFY: client restarted, its locks are released", "client", a.MonName, "state", a.State, "peer", req.Peer, "locks", n)
		m.relayNotify(req)
		return nil
	}
	return p
}
