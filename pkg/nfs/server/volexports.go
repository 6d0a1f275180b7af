package server

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/volumes"
	"github.com/nfsrdma/nfsrdma-csi/pkg/rpcrdma"
)

// Volumes is the volume registry the server exports (*volumes.Registry):
// Attach makes the server its exporter (volumes.Exporter), which installs
// the volume exports and the credit grants.
type Volumes interface {
	Attach(e volumes.Exporter) error
}

// SetVolumeExports replaces the volume exports (volumes.Exporter):
// each is resolved beneath the root (a directory reached without
// symlinks, on the root's file system, found at the Dev and Ino the
// registry saw), with ExplicitClients set. It fails, changing nothing,
// when one cannot be resolved, overlaps a static export other than "/",
// or takes another export's id. A Missing export is not installed; its
// path only keeps static exports away.
func (s *Server) SetVolumeExports(exps []volumes.Export) error {
	list := make([]*export, 0, len(exps))
	s.tmu.Lock()
	defer s.tmu.Unlock()
	known := make(map[string]*export, len(s.vols))
	for _, ex := range s.vols {
		known[ex.Path] = ex
	}
	paths := make([]string, 0, len(exps))
	for _, ve := range exps {
		p := strings.TrimPrefix(cleanPath(ve.Path), "/")
		for _, st := range s.static {
			if err := overlap(st, []string{p}); err != nil {
				return err
			}
		}
		paths = append(paths, p)
		if ve.Missing {
			continue
		}
		e := Export{Path: ve.Path, ExplicitClients: true,
			Clients: slices.Clone(ve.Clients), ReadOnlyClients: slices.Clone(ve.ReadOnlyClients),
			Nodes: slices.Clone(ve.Nodes), ReadOnlyNodes: slices.Clone(ve.ReadOnlyNodes)}
		var ex *export
		if old := known[cleanPath(ve.Path)]; old != nil && old.dev == ve.Dev && old.ino == ve.Ino {
			// resolved before: its root handle stands, even if the
			// directory went away since (its handles go stale then)
			cp := *old
			cp.Export = e
			cp.Path = old.Path
			ex = &cp
		} else {
			var err error
			if ex, err = resolveExport(s.rootFD, s.seal, e); err != nil {
				return err
			}
			if ex.dev != ve.Dev || ex.ino != ve.Ino {
				return fmt.Errorf("nfs server: export %q: the directory was replaced", ve.Path)
			}
		}
		if ve.Volume != nil {
			ex.vol = ve.Volume
		}
		list = append(list, ex)
	}
	old := s.vols
	s.vols = list
	if err := s.rebuildLocked(); err != nil {
		s.vols = old
		return err
	}
	s.volPaths = paths
	klog.V(2).InfoS("nfs server: volume exports set", "count", len(list))
	return nil
}

// StaticOverlap returns an error naming the static export, other than
// "/", that path p (relative to the root) equals, contains or lies in
// (volumes.Exporter); nil when there is none.
func (s *Server) StaticOverlap(p string) error {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	for _, e := range s.static {
		q := strings.TrimPrefix(e.Path, "/")
		if q != "" && volumes.Overlaps(p, q) {
			return fmt.Errorf("it overlaps the static export %q", e.Path)
		}
	}
	return nil
}

// overlap reports, as an error, whether static export e (other than "/")
// equals, contains or lies in one of the volume paths vols (relative to
// the root).
func overlap(e *export, vols []string) error {
	q := strings.TrimPrefix(e.Path, "/")
	if q == "" {
		return nil
	}
	for _, p := range vols {
		if volumes.Overlaps(p, q) {
			return fmt.Errorf("nfs server: export %q overlaps volume %q", e.Path, p)
		}
	}
	return nil
}

// rdmaListener is what the server needs of its ServeRDMA listener.
type rdmaListener interface {
	Metrics() rpcrdma.Metrics
	SetMachineGrants(map[string]int)
	Connections() []rpcrdma.ConnInfo
}

// SetMachineGrants replaces the RPC-over-RDMA credits granted per AUTH_SYS
// machine name (admin.Credits; RFC 8166 section 3.3.1; volumes.Exporter):
// the NFS/RDMA listener applies them to each connection from its next
// reply, and a later ServeRDMA listener starts with them.
func (s *Server) SetMachineGrants(grants map[string]int) {
	s.rdmaMu.Lock()
	defer s.rdmaMu.Unlock()
	s.credits = maps.Clone(grants)
	if s.rdma != nil {
		s.rdma.SetMachineGrants(s.credits)
	}
}

// setRDMA installs l as the NFS/RDMA listener with the current grants.
func (s *Server) setRDMA(l rdmaListener) {
	s.rdmaMu.Lock()
	defer s.rdmaMu.Unlock()
	s.rdma = l
	l.SetMachineGrants(s.credits)
}

// Connections returns the NFS/RDMA connections with their credits as the
// admin API shows them (volumes.Exporter).
func (s *Server) Connections() []admin.Connection {
	var out []admin.Connection
	for _, c := range s.RDMAConnections() {
		out = append(out, admin.Connection{
			Peer: c.Peer, Machine: c.Machine, Named: c.Named, Target: c.Target,
			Grant: c.Grant, Posted: c.Posted, InProcess: c.InProcess,
		})
	}
	return out
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
