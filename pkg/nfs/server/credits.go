package server

import (
	"fmt"
	"maps"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
)

// rdmaListener is what the server needs of its ServeRDMA listener.
type rdmaListener interface {
	Metrics() rpcrdma.Metrics
	SetMachineGrants(map[string]int)
	Connections() []rpcrdma.ConnInfo
}

// SetCredits replaces the RPC-over-RDMA credits granted per AUTH_SYS
// machine name (admin.Credits; RFC 8166 section 3.3.1): the NFS/RDMA
// listener applies them to each connection from its next reply, and the
// state file keeps them across restarts. Errors wrap admin.ErrInvalid for
// a grant below 1 or a machine name empty or longer than
// admin.MaxMachineName bytes (nothing changed), or are internal when the
// state file cannot be written (the grants apply anyway).
func (s *Server) SetCredits(grants map[string]int) error {
	if err := checkCredits(grants); err != nil {
		return err
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	s.credits = maps.Clone(grants)
	s.rdmaMu.Lock()
	if s.rdma != nil {
		s.rdma.SetMachineGrants(s.credits)
	}
	s.rdmaMu.Unlock()
	klog.V(2).InfoS("nfs server: credit grants set", "machines", len(grants))
	return s.saveLocked()
}

// checkCredits checks credit grants per machine name (SetCredits, and the
// state file's): errors wrap admin.ErrInvalid for a grant below 1 or a
// machine name empty or longer than admin.MaxMachineName bytes.
func checkCredits(grants map[string]int) error {
	for m, n := range grants {
		if m == "" || len(m) > admin.MaxMachineName {
			return fmt.Errorf("%w: machine name %q: want 1 to %d bytes", admin.ErrInvalid, m, admin.MaxMachineName)
		}
		if n < 1 {
			return fmt.Errorf("%w: %d credits for %q: a grant is at least 1 (RFC 8166 section 3.3.1)", admin.ErrInvalid, n, m)
		}
	}
	return nil
}

// Credits returns the credit grants per machine name and the NFS/RDMA
// connections with what each is granted now.
func (s *Server) Credits() admin.Credits {
	s.tmu.Lock()
	out := admin.Credits{Grants: maps.Clone(s.credits)}
	s.tmu.Unlock()
	if out.Grants == nil {
		out.Grants = map[string]int{}
	}
	for _, c := range s.RDMAConnections() {
		out.Connections = append(out.Connections, admin.Connection{
			Peer: c.Peer, Machine: c.Machine, Named: c.Named, Target: c.Target,
			Grant: c.Grant, Posted: c.Posted, InProcess: c.InProcess,
		})
	}
	return out
}

// setRDMA installs l as the NFS/RDMA listener with the current grants.
func (s *Server) setRDMA(l rdmaListener) {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	s.rdmaMu.Lock()
	defer s.rdmaMu.Unlock()
	s.rdma = l
	l.SetMachineGrants(s.credits)
}

// RDMAConnections returns the NFS/RDMA listener's connections with their
// credits (rpcrdma.Server.Connections); nil before ServeRDMA.
func (s *Server) RDMAConnections() []rpcrdma.ConnInfo {
	s.rdmaMu.Lock()
	l := s.rdma
	s.rdmaMu.Unlock()
	if l == nil {
		return nil
	}
	return l.Connections()
}
