package lockd

import (
	"context"
	"fmt"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/lockcb"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nlm"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// An export server on a node's host network holds NLM v4 and NSM v1 in
// the node's rpcbind, where lock servers look for the node's mounts'
// callback service: the client procedures they call (GRANTED,
// GRANTED_MSG, SM_NOTIFY) reach this server. With Options.NodeCallbacks
// set they are relayed to the node's callback service (package lockcb),
// which passes each to the mount it concerns, as Linux's one lockd per
// host serves both roles.

// relayNLM sets GRANTED and GRANTED_MSG in p to relay to the node's
// callback service when Options.NodeCallbacks is set.
func (m *Manager) relayNLM(p []sunrpc.Handler) {
	if m.opts.NodeCallbacks == "" {
		return
	}
	p[nlm.ProcGranted] = func(ctx context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
		var a nlm.TestArgs
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		rctx, cancel := context.WithTimeout(ctx, lockcb.DefaultAnswerTimeout+time.Second)
		defer cancel()
		st, err := lockcb.Relay(rctx, m.opts.NodeCallbacks, req.Prog, req.Proc, req.Peer.String(), req.Args)
		if err != nil {
			// the caller calls GRANTED again later
			m.log.Info("lockd: GRANTED for a mount of this node not relayed", "peer", req.Peer, "err", err)
			return fmt.Errorf("%w: %w", sunrpc.ErrSystemErr, err)
		}
		r := nlm.Res{Cookie: a.Cookie, Stat: nlm.Stat(st)}
		r.Encode(&b.Encoder)
		return nil
	}
	p[nlm.ProcGrantedMsg] = func(_ context.Context, req *sunrpc.Request, _ *sunrpc.Builder) error {
		var a nlm.TestArgs
		if err := a.Decode(req.ArgsDecoder()); err != nil {
			return garbage(err)
		}
		m.relayAsync(req)
		return nil // void: the mount answers with a GRANTED_RES call
	}
}

// relayNotify relays an SM_NOTIFY (already decoded) to the node's
// callback service when Options.NodeCallbacks is set.
func (m *Manager) relayNotify(req *sunrpc.Request) {
	if m.opts.NodeCallbacks != "" {
		m.relayAsync(req)
	}
}

// relayAsync relays req after its (void) reply.
func (m *Manager) relayAsync(req *sunrpc.Request) {
	args := append([]byte(nil), req.Args...)
	prog, proc, peer := req.Prog, req.Proc, req.Peer.String()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.ctx, lockcb.DefaultAnswerTimeout+time.Second)
		defer cancel()
		if _, err := lockcb.Relay(ctx, m.opts.NodeCallbacks, prog, proc, peer, args); err != nil {
			m.log.Info("lockd: callback for a mount of this node not relayed", "peer", peer, "proc", proc, "err", err)
		}
	}()
}
