package statmon

import (
	"context"
	"fmt"
	"net"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nsm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// NotifyFunc is what a service does besides the callbacks with an
// SM_NOTIFY it received (its arguments decoded; req valid only during the
// call): pass it on to its own mounts, for one. It must not block.
type NotifyFunc func(ctx context.Context, req *sunrpc.Request, a *nsm.StatChge)

func garbage(err error) error { return fmt.Errorf("%w: %w", sunrpc.ErrGarbageArgs, err) }

// Handlers returns the procedures of NSM version 1, for
// sunrpc.Server.Register(nsm.Program, nsm.Version, ...), as the package
// comment says. SM_NOTIFY runs onNotify (nil: nothing), then the
// callbacks in the background, after the void reply.
func (m *Monitor) Handlers(onNotify NotifyFunc) []sunrpc.Handler {
	h := make([]sunrpc.Handler, nsm.NumProcs)
	h[nsm.ProcNull] = func(context.Context, *sunrpc.Request, *sunrpc.Builder) error { return nil }
	h[nsm.ProcStat] = func(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		var a nsm.SMName
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		r := nsm.StatRes{Res: nsm.StatSucc, State: m.LocalState()}
		r.Encode(&res.Encoder)
		return nil
	}
	h[nsm.ProcMon] = func(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		var a nsm.Mon
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		r := nsm.StatRes{Res: nsm.StatFail, State: -1} // state undefined for stat_fail
		local, _ := isLocal(req.Peer)
		switch {
		case !local:
			klog.InfoS("status monitor: SM_MON refused: not from this host", "peer", req.Peer, "mon_name", a.MonID.MonName)
		case !m.monitor(&a):
			klog.InfoS("status monitor: SM_MON refused", "mon_name", a.MonID.MonName, "my_name", a.MonID.MyID.MyName,
				"my_prog", a.MonID.MyID.MyProg, "my_proc", a.MonID.MyID.MyProc)
		default:
			klog.V(2).InfoS("status monitor: monitoring", "mon_name", a.MonID.MonName, "my_name", a.MonID.MyID.MyName,
				"my_prog", a.MonID.MyID.MyProg, "my_vers", a.MonID.MyID.MyVers, "my_proc", a.MonID.MyID.MyProc)
			r = nsm.StatRes{Res: nsm.StatSucc, State: m.LocalState()}
		}
		r.Encode(&res.Encoder)
		return nil
	}
	h[nsm.ProcUnmon] = func(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		var a nsm.MonID
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		if local, _ := isLocal(req.Peer); local {
			ok := m.unmonitor(a)
			klog.V(2).InfoS("status monitor: SM_UNMON", "mon_name", a.MonName, "my_name", a.MyID.MyName, "monitored", ok)
		} else {
			klog.InfoS("status monitor: SM_UNMON refused: not from this host", "peer", req.Peer, "mon_name", a.MonName)
		}
		(&nsm.Stat{State: m.LocalState()}).Encode(&res.Encoder)
		return nil
	}
	h[nsm.ProcUnmonAll] = func(_ context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		var a nsm.MyID
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		if local, _ := isLocal(req.Peer); local {
			n := m.unmonitorAll(a)
			klog.V(2).InfoS("status monitor: SM_UNMON_ALL", "my_name", a.MyName, "my_prog", a.MyProg, "monitors", n)
		} else {
			klog.InfoS("status monitor: SM_UNMON_ALL refused: not from this host", "peer", req.Peer, "my_name", a.MyName)
		}
		(&nsm.Stat{State: m.LocalState()}).Encode(&res.Encoder)
		return nil
	}
	h[nsm.ProcSimuCrash] = func(ctx context.Context, req *sunrpc.Request, _ *sunrpc.Builder) error {
		if local, reserved := isLocal(req.Peer); !local || !reserved {
			klog.InfoS("status monitor: SM_SIMU_CRASH refused: not from a reserved port of this host", "peer", req.Peer)
			return nil
		}
		peers, state := m.crash()
		klog.InfoS("status monitor: SM_SIMU_CRASH: state moved on, monitors forgotten", "state", state, "hosts", len(peers))
		go m.notifyPeers(context.WithoutCancel(ctx), peers, state)
		return nil
	}
	h[nsm.ProcNotify] = func(ctx context.Context, req *sunrpc.Request, res *sunrpc.Builder) error {
		var a nsm.StatChge
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		if onNotify != nil {
			onNotify(ctx, req, &a)
		}
		peerIP := ""
		if req.Peer != nil {
			if host, _, err := net.SplitHostPort(req.Peer.String()); err == nil {
				peerIP = host
			}
		}
		go func() {
			answered, made := m.Notify(context.WithoutCancel(ctx), &a, peerIP)
			if made > 0 {
				klog.InfoS("status monitor: SM_NOTIFY passed on to this host's lock managers", "mon_name", a.MonName, "state", a.State,
					"peer", peerIP, "callbacks", made, "answered", answered)
			}
		}()
		return nil // void
	}
	return h
}
