package server

import (
	"net/netip"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/internal/lograte"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// refusalInterval is the least time between two log lines of one client's
// refusals of one program for one reason: a client calling in a loop
// cannot flood the log.
const refusalInterval = 10 * time.Second

// refusalClients bounds the clients, programs and reasons remembered (see
// lograte.Limiter.MaxKeys).
const refusalClients = 4096

// Reasons of refused calls, as logged.
const (
	reasonNotListed = "client not in the export's access list"
	reasonNoCert    = "no verified certificate naming a node of the export (RPC-with-TLS required)"
	// reasonNotBeneath: MNT of a path under an export that a symlink, a
	// mount point or ".." takes out of it
	reasonNotBeneath = "path not reachable beneath the export"
)

// refusalKey is one client, program and reason of refusals.
type refusalKey struct {
	client netip.Addr
	prog   string
	reason string
}

// refusalLog logs refused calls (MOUNT, NFS, NLM of a client outside an
// export's access list; MOUNT of a path that is no export) with klog at
// verbosity 0: at most one line per client, program and reason per
// refusalInterval; the line counts the refusals left out since the
// previous one.
type refusalLog struct {
	lim lograte.Limiter
}

func newRefusalLog() *refusalLog {
	return &refusalLog{lim: lograte.Limiter{Interval: refusalInterval, MaxKeys: refusalClients}}
}

// refused logs one refusal of a call of prog/proc by client for export
// (the export's path, or the path asked for) and reason, unless the rate
// limit holds it back; it reports whether it logged.
func (l *refusalLog) refused(client netip.Addr, prog, proc, export, reason string) bool {
	ok, skipped := l.lim.Allow(refusalKey{client: client, prog: prog, reason: reason})
	if ok {
		klog.InfoS("nfs server: call refused", "client", client.String(), "program", prog, "procedure", proc,
			"export", export, "reason", reason, "notLoggedSince", skipped)
	}
	return ok
}

// refuse logs (see refusalLog) that the caller of req was refused export
// ex in a call of prog (MOUNT, NFS, NLM) procedure proc.
func (s *Server) refuse(req *sunrpc.Request, prog, proc string, ex *export) {
	c := callerOf(req)
	reason := reasonNotListed
	if s.nameOnly && ex.ExplicitClients {
		reason = reasonNoCert
	}
	s.refusals.refused(c.addr, prog, proc, ex.Path, reason)
}
