package server

import (
	"net/netip"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// refusalInterval is the least time between two log lines of one client's
// refusals for one reason: a client calling in a loop cannot flood the log.
const refusalInterval = 10 * time.Second

// refusalClients bounds the clients a refusalLog remembers; past it, the
// entries older than refusalInterval are dropped, and a refusal finding
// the table still full is not logged.
const refusalClients = 4096

// Reasons of refused calls, as logged.
const (
	reasonNotListed = "client not in the export's access list"
	reasonNoCert    = "no verified certificate naming a node of the export (RPC-with-TLS required)"
)

// refusalKey is one client and one reason for a refusal.
type refusalKey struct {
	client netip.Addr
	prog   string
	reason string
}

// refusalEntry is when a refusal of a key was last logged and how many
// were not logged since.
type refusalEntry struct {
	logged     time.Time
	suppressed int
}

// refusalLog logs refused calls (MOUNT, NFS, NLM of a client outside an
// export's access list) with klog at verbosity 0: at most one line per
// client, program and reason per refusalInterval; the line counts the
// refusals left out since the previous one.
type refusalLog struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[refusalKey]*refusalEntry
}

// refused logs one refusal of a call of prog/proc by client for export
// (the export's path) and reason, unless one of the same client, prog and
// reason was logged less than refusalInterval ago. It reports whether it
// logged.
func (l *refusalLog) refused(client netip.Addr, prog, proc, export, reason string) bool {
	l.mu.Lock()
	now := time.Now()
	if l.now != nil {
		now = l.now()
	}
	if l.m == nil {
		l.m = map[refusalKey]*refusalEntry{}
	}
	k := refusalKey{client: client, prog: prog, reason: reason}
	e := l.m[k]
	if e != nil && now.Sub(e.logged) < refusalInterval {
		e.suppressed++
		l.mu.Unlock()
		return false
	}
	if e == nil {
		if len(l.m) >= refusalClients {
			for k, o := range l.m {
				if now.Sub(o.logged) >= refusalInterval {
					delete(l.m, k)
				}
			}
			if len(l.m) >= refusalClients {
				l.mu.Unlock()
				return false
			}
		}
		e = &refusalEntry{}
		l.m[k] = e
	}
	suppressed := e.suppressed
	e.logged, e.suppressed = now, 0
	l.mu.Unlock()
	klog.InfoS("nfs server: call refused", "client", client.String(), "program", prog, "procedure", proc,
		"export", export, "reason", reason, "notLoggedSince", suppressed)
	return true
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
