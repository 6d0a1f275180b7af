package server

import (
	"context"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// mountHandlers returns the procedures of MOUNT version 3 (RFC 1813
// appendix I), indexed by procedure number.
func (s *Server) mountHandlers() []sunrpc.Handler {
	p := make([]sunrpc.Handler, mount3.NumProcs)
	p[mount3.ProcNull] = func(context.Context, *sunrpc.Request, *sunrpc.Builder) error { return nil }
	p[mount3.ProcMnt] = s.mnt
	p[mount3.ProcDump] = s.dump
	p[mount3.ProcUmnt] = s.umnt
	p[mount3.ProcUmntAll] = s.umntAll
	p[mount3.ProcExport] = s.export
	return p
}

// mnt is MOUNTPROC3_MNT (RFC 1813 section 5.2.1): the handle of an export
// or of a directory beneath one (reached without symlinks).
// MNT3ERR_NOENT for an unknown path, MNT3ERR_ACCES for a client outside
// the export's list, MNT3ERR_NOTDIR for a non-directory. A mount is
// logged at verbosity 2; a failure at verbosity 0, rate-limited
// (refusals.go): a client cannot flood the log with MNT calls.
func (s *Server) mnt(_ context.Context, req *sunrpc.Request, b *sunrpc.Builder) error {
	var a mount3.MntArgs
	if err := a.Decode(req.ArgsDecoder()); err != nil {
		return garbage(err)
	}
	var r mount3.MntRes
	r.Status = s.doMnt(req, a.Path, &r)
	switch r.Status {
	case mount3.OK:
		klog.V(2).InfoS("mount: MNT", "peer", req.Peer, "transport", req.Transport, "path", a.Path, "status", r.Status)
	case mount3.ErrAccess: // logged by doMnt with the export
	default:
		s.refusals.refused(peerAddr(req.Peer), "MOUNT", "MNT", cleanPath(a.Path), r.Status.String())
	}
	r.Encode(&b.Encoder)
	return nil
}

func (s *Server) doMnt(req *sunrpc.Request, p string, r *mount3.MntRes) mount3.Status {
	ex, rel := s.exports.Load().find(p)
	if ex == nil {
		return mount3.ErrNoEnt
	}
	if ok, _ := ex.accessBy(callerOf(req), s.nameOnly); !ok {
		s.refuse(req, "MOUNT", "MNT", ex)
		return mount3.ErrAccess
	}
	if rel == "." {
		r.FH, _ = nfs3.NewFH(ex.rootFH[:ex.fhLen])
	} else {
		full := strings.TrimLeft(path.Join(ex.Path, rel), "/") // relative to the root, also under the "/" export
		fd, err := unix.Openat2(s.rootFD, full, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC,
			Resolve: beneath,
		})
		if err != nil {
			switch err {
			case unix.ENOENT:
				return mount3.ErrNoEnt
			case unix.ENOTDIR:
				return mount3.ErrNotDir
			}
			s.refusals.refused(peerAddr(req.Peer), "MOUNT", "MNT", cleanPath(p), reasonNotBeneath)
			return mount3.ErrAccess
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			unix.Close(fd)
			return mount3.ErrNotDir
		}
		r.FH, err = s.seal.makeFH(ex.id, fd, "", unix.AT_EMPTY_PATH)
		unix.Close(fd)
		if err != nil {
			return mount3.ErrServerFault
		}
	}
	r.AuthFlavors = []uint32{uint32(sunrpc.AuthSys), uint32(sunrpc.AuthNone)}
	s.mu.Lock()
	e := mount3.MountEntry{Hostname: peerAddr(req.Peer).String(), Directory: cleanPath(p)}
	if !slices.Contains(s.mounts, e) {
		s.mounts = append(s.mounts, e)
	}
	s.mu.Unlock()
	return mount3.OK
}

// dump is MOUNTPROC3_DUMP (RFC 1813 section 5.2.2): the mounts recorded by
// MNT and not removed by UMNT/UMNTALL (kept in memory only).
func (s *Server) dump(_ context.Context, _ *sunrpc.Request, b *sunrpc.Builder) error {
	s.mu.Lock()
	r := mount3.DumpRes{Mounts: slices.Clone(s.mounts)}
	s.mu.Unlock()
	r.Encode(&b.Encoder)
	return nil
}

// umnt is MOUNTPROC3_UMNT (RFC 1813 section 5.2.3).
func (s *Server) umnt(_ context.Context, req *sunrpc.Request, _ *sunrpc.Builder) error {
	var a mount3.UmntArgs
	if err := a.Decode(req.ArgsDecoder()); err != nil {
		return garbage(err)
	}
	e := mount3.MountEntry{Hostname: peerAddr(req.Peer).String(), Directory: cleanPath(a.Path)}
	s.mu.Lock()
	s.mounts = slices.DeleteFunc(s.mounts, func(m mount3.MountEntry) bool { return m == e })
	s.mu.Unlock()
	return nil
}

// umntAll is MOUNTPROC3_UMNTALL (RFC 1813 section 5.2.4).
func (s *Server) umntAll(_ context.Context, req *sunrpc.Request, _ *sunrpc.Builder) error {
	h := peerAddr(req.Peer).String()
	s.mu.Lock()
	s.mounts = slices.DeleteFunc(s.mounts, func(m mount3.MountEntry) bool { return m.Hostname == h })
	s.mu.Unlock()
	return nil
}

// export is MOUNTPROC3_EXPORT (RFC 1813 section 5.2.5): every export with
// its client list (read-write and read-only) as groups (none: every
// client); an export with an explicit empty list is not listed.
func (s *Server) export(_ context.Context, _ *sunrpc.Request, b *sunrpc.Builder) error {
	t := s.exports.Load()
	var r mount3.ExportRes
	for _, e := range t.list {
		if e.ExplicitClients && len(e.Clients)+len(e.ReadOnlyClients) == 0 {
			continue // nobody may mount it
		}
		x := mount3.Export{Dir: e.Path}
		for _, p := range slices.Concat(e.Clients, e.ReadOnlyClients) {
			if p.IsSingleIP() {
				x.Groups = append(x.Groups, p.Addr().String())
			} else {
				x.Groups = append(x.Groups, p.String())
			}
		}
		r.Exports = append(r.Exports, x)
	}
	r.Encode(&b.Encoder)
	return nil
}
