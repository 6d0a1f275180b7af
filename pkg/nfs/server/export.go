package server

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/volumes"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

// Export is one exported directory.
type Export struct {
	// Path names the export as clients see it in MOUNT (RFC 1813 appendix
	// I): "/" for the server root, or "/vol1" for the directory vol1 under
	// it. It is cleaned; it must not leave the root.
	Path string
	// Clients are the addresses allowed to mount and use the export
	// read-write. When both Clients and ReadOnlyClients are empty, every
	// client is allowed unless ExplicitClients is set; when only Clients
	// is empty, only the ReadOnlyClients are allowed.
	Clients []netip.Prefix
	// ReadOnlyClients are further addresses allowed to mount and use the
	// export read-only (every modifying procedure fails with
	// NFS3ERR_ROFS); an address in Clients too is read-write.
	ReadOnlyClients []netip.Prefix
	// ExplicitClients makes Clients and ReadOnlyClients the complete list:
	// when both are empty, no client may use the export. Volume exports
	// (package volumes) set it.
	ExplicitClients bool
	// ReadOnly makes every modifying procedure fail with NFS3ERR_ROFS.
	ReadOnly bool
	// RootSquash maps uid 0 (and gid 0) to 65534, as knfsd's root_squash.
	RootSquash bool
	// Nodes and ReadOnlyNodes are the names of the nodes allowed to use
	// the export read-write and read-only, known by the name of their
	// verified RPC-with-TLS certificate (sunrpc.TLSInfo.PeerName; RFC
	// 9289 section 5.2.1) whatever their address. Volume exports get
	// them from the registry (admin.Access.Name).
	Nodes, ReadOnlyNodes []string
}

// Allows reports whether the client at addr, without a certificate, may
// use e.
func (e *Export) Allows(addr netip.Addr) bool {
	ok, _ := e.access(addr)
	return ok
}

// caller is who makes a call: its address and, over RPC-with-TLS with a
// certificate that verified, the certificate's name.
type caller struct {
	addr netip.Addr
	name string
}

// callerOf returns the caller of req.
func callerOf(req *sunrpc.Request) caller {
	c := caller{addr: peerAddr(req.Peer)}
	if req.TLS != nil && req.TLS.Verified() {
		c.name = req.TLS.PeerName
	}
	return c
}

// accessBy reports whether c may use e, and whether only read-only: a
// certificate naming one of Nodes or ReadOnlyNodes is enough; otherwise
// the address decides (Clients, ReadOnlyClients), except on an export
// with an explicit list (a volume's) when nameOnly is set: a server that
// requires RPC-with-TLS with client certificates takes an address alone
// for no node.
func (e *Export) accessBy(c caller, nameOnly bool) (allowed, readOnly bool) {
	if c.name != "" {
		if slices.Contains(e.Nodes, c.name) {
			return true, e.ReadOnly
		}
		if slices.Contains(e.ReadOnlyNodes, c.name) {
			return true, true
		}
	}
	if nameOnly && e.ExplicitClients {
		return false, false
	}
	return e.access(c.addr)
}

// access reports whether the client at addr may use e, and whether only
// read-only (e.ReadOnly, or addr only in ReadOnlyClients).
func (e *Export) access(addr netip.Addr) (allowed, readOnly bool) {
	if len(e.Clients) == 0 && len(e.ReadOnlyClients) == 0 {
		return !e.ExplicitClients, e.ReadOnly
	}
	addr = addr.Unmap()
	for _, p := range e.Clients {
		if p.Contains(addr) {
			return true, e.ReadOnly
		}
	}
	for _, p := range e.ReadOnlyClients {
		if p.Contains(addr) {
			return true, true
		}
	}
	return false, false
}

// ExportID returns the 32-bit export id of the export path p carried in
// file handles: FNV-1a of the cleaned path, stable across restarts.
func ExportID(p string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(cleanPath(p)))
	return h.Sum32()
}

func cleanPath(p string) string { return path.Clean("/" + p) }

// beneath is the resolution of every path the server opens by name under
// its root (exports, MNT): no symlink, no "..", no mount point.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS

// export is an Export resolved under the root.
type export struct {
	Export
	id     uint32
	rootFH [handleMax]byte // the root's file handle
	fhLen  int
	dev    uint64 // st_dev and st_ino of the export's root directory
	ino    uint64
	vol    quotaVolume // the quota of the volume whose export this is, or nil
}

// exportTable is an immutable snapshot of the exports, replaced whole.
type exportTable struct {
	list []*export
	byID map[uint32]*export
}

// resolveExports opens each export's directory beneath rootFD (never
// following a symlink, never leaving the root) and computes its root handle.
func resolveExports(rootFD int, seal *sealer, exps []Export) ([]*export, error) {
	list := make([]*export, 0, len(exps))
	for _, e := range exps {
		ex, err := resolveExport(rootFD, seal, e)
		if err != nil {
			return nil, err
		}
		list = append(list, ex)
	}
	return list, nil
}

// resolveExport resolves one export (see resolveExports).
func resolveExport(rootFD int, seal *sealer, e Export) (*export, error) {
	e.Path = cleanPath(e.Path)
	for i, p := range e.Clients {
		e.Clients[i] = p.Masked()
	}
	for i, p := range e.ReadOnlyClients {
		e.ReadOnlyClients[i] = p.Masked()
	}
	id := ExportID(e.Path)
	ex := &export{Export: e, id: id}
	rel := strings.TrimPrefix(e.Path, "/")
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(rootFD, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: beneath,
	})
	if err != nil {
		return nil, fmt.Errorf("nfs server: export %q: %w", e.Path, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	if err == nil {
		ex.fhLen, err = seal.encodeHandle(ex.rootFH[:], id, fd, "", unix.AT_EMPTY_PATH)
	}
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("nfs server: export %q: %w", e.Path, err)
	}
	ex.dev, ex.ino = st.Dev, st.Ino
	return ex, nil
}

// errDuplicateExport: two exports with one path or one export id.
var errDuplicateExport = errors.New("duplicate export path or export id")

// newTable makes an export table of resolved exports; two exports with the
// same id are an error wrapping errDuplicateExport.
func newTable(list []*export) (*exportTable, error) {
	t := &exportTable{list: list, byID: make(map[uint32]*export, len(list))}
	for _, ex := range list {
		if o := t.byID[ex.id]; o != nil {
			return nil, fmt.Errorf("nfs server: export %q: %w: %q", ex.Path, errDuplicateExport, o.Path)
		}
		t.byID[ex.id] = ex
	}
	return t, nil
}

// find returns the export whose path is p or the longest one containing p,
// and p relative to it ("." for the export itself).
func (t *exportTable) find(p string) (*export, string) {
	p = cleanPath(p)
	var best *export
	rel := ""
	for _, e := range t.list {
		switch {
		case p == e.Path:
			return e, "."
		case e.Path == "/" && (best == nil):
			best, rel = e, strings.TrimPrefix(p, "/")
		case strings.HasPrefix(p, e.Path+"/") && (best == nil || len(e.Path) > len(best.Path)):
			best, rel = e, strings.TrimPrefix(p, e.Path+"/")
		}
	}
	return best, rel
}

// ParseExport parses the command-line form PATH:CLIENTS[:OPTS], as
// exports(5) has it: CLIENTS is a comma-separated list of addresses or
// CIDRs (IPv6 included), or "*" for every client, and must be given; OPTS
// a comma-separated list of ro, rw, root_squash, no_root_squash. Defaults:
// rw, root_squash (uid and gid 0 of callers mapped to 65534, as knfsd).
func ParseExport(s string) (Export, error) {
	const want = "want PATH:CLIENTS[:OPTS], CLIENTS addresses or CIDRs (comma-separated) or *, OPTS ro|rw,root_squash|no_root_squash"
	path, rest, _ := strings.Cut(s, ":")
	if path == "" {
		return Export{}, fmt.Errorf("export %q: %s", s, want)
	}
	e := Export{Path: cleanPath(path), RootSquash: true}
	if i := strings.LastIndexByte(rest, ':'); i >= 0 || isOptions(rest) {
		opts := rest[i+1:]
		if isOptions(opts) {
			rest = rest[:max(i, 0)]
			for _, o := range strings.Split(opts, ",") {
				switch o {
				case "ro":
					e.ReadOnly = true
				case "rw":
					e.ReadOnly = false
				case "root_squash":
					e.RootSquash = true
				case "no_root_squash":
					e.RootSquash = false
				}
			}
		}
	}
	if rest == "" {
		return Export{}, fmt.Errorf("export %q: no clients (give * for every client): %s", s, want)
	}
	every := false
	for _, f := range strings.Split(rest, ",") {
		if f == "*" {
			every = true
			continue
		}
		p, err := volumes.ParsePrefix(f)
		if err != nil {
			return Export{}, fmt.Errorf("export %q: %w", s, err)
		}
		e.Clients = append(e.Clients, p)
	}
	if every {
		e.Clients = nil
	}
	return e, nil
}

// isOptions reports whether s is a non-empty comma-separated list of
// export options.
func isOptions(s string) bool {
	if s == "" {
		return false
	}
	for _, o := range strings.Split(s, ",") {
		switch o {
		case "ro", "rw", "root_squash", "no_root_squash":
		default:
			return false
		}
	}
	return true
}

// peerAddr returns the IP address of a caller, or the zero Addr.
func peerAddr(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	case *net.UDPAddr:
		return a.AddrPort().Addr().Unmap()
	case nil:
		return netip.Addr{}
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	if ad, err := netip.ParseAddr(a.String()); err == nil {
		return ad.Unmap()
	}
	return netip.Addr{}
}
