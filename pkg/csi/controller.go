package csi

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/nfs3"
)

// Metadata the controller keeps with each volume on the export server
// (admin.Volume.Meta), so that ListVolumes and ListSnapshots can name
// volumes by their CSI IDs.
const metaVolumeID = "csi.volumeID"

// controller is the CSI Controller service.
type controller struct {
	csipb.UnimplementedControllerServer
	cfg   Config
	be    *backends
	locks *keyLocks
}

func newController(cfg Config) *controller {
	p := cfg.Ports
	if p.NFS == 0 {
		p.NFS = nfs3.Port
	}
	if p.RDMA == 0 {
		p.RDMA = nfs3.RDMAPort
	}
	if p.Mount == 0 {
		p.Mount = mount3.Port
	}
	cfg.Ports = p
	return &controller{cfg: cfg, be: newBackends(p, cfg.AdminToken, cfg.Servers, cfg.VolumeHandles), locks: newKeyLocks()}
}

var controllerCaps = []csipb.ControllerServiceCapability_RPC_Type{
	csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	csipb.ControllerServiceCapability_RPC_LIST_VOLUMES,
	csipb.ControllerServiceCapability_RPC_GET_CAPACITY,
	csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csipb.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	csipb.ControllerServiceCapability_RPC_CLONE_VOLUME,
	csipb.ControllerServiceCapability_RPC_PUBLISH_READONLY,
	csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	csipb.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
	csipb.ControllerServiceCapability_RPC_GET_VOLUME,
	csipb.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	csipb.ControllerServiceCapability_RPC_GET_SNAPSHOT,
}

func (c *controller) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	var caps []*csipb.ControllerServiceCapability
	for _, t := range controllerCaps {
		caps = append(caps, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{
			Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// probe checks every server given at start or named in a call since.
func (c *controller) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, s := range c.be.seen() {
		if a := c.be.adminClient(s); a != nil {
			if _, err := a.Status(ctx); err != nil {
				return fmt.Errorf("admin API of %s: %w", s, err)
			}
			continue
		}
		b, err := c.be.get(ctx, s, "/")
		if err != nil {
			return err
		}
		if err := b.nfs.Null(ctx); err != nil {
			c.be.drop(b)
			return err
		}
	}
	return nil
}

// checkCaps validates volume capabilities: a file system (mount) access
// type, any access mode of a shared file system. Block is not offered.
func checkCaps(caps []*csipb.VolumeCapability) error {
	if len(caps) == 0 {
		return errors.New("volume capabilities missing")
	}
	for _, vc := range caps {
		if vc == nil {
			return errors.New("nil volume capability")
		}
		if vc.GetBlock() != nil {
			return errors.New("block access type is not supported (a file system volume)")
		}
		if vc.GetMount() == nil {
			return errors.New("access type missing: want mount")
		}
		if fs := vc.GetMount().GetFsType(); fs != "" && fs != "nfs" && fs != "fuse" && fs != "fuse.nfsrdma" {
			return fmt.Errorf("fs type %q is not supported", fs)
		}
		if vc.GetAccessMode() == nil || vc.GetAccessMode().GetMode() == csipb.VolumeCapability_AccessMode_UNKNOWN {
			return errors.New("access mode missing")
		}
	}
	return nil
}

// capacity returns the quota for a capacity range, in bytes: the
// required size, else the limit, else 0 (no quota).
func capacity(cr *csipb.CapacityRange) (int64, error) {
	if cr == nil {
		return 0, nil
	}
	req, lim := cr.GetRequiredBytes(), cr.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, errors.New("negative capacity")
	}
	if lim > 0 && req > lim {
		return 0, fmt.Errorf("required %d bytes exceeds the limit of %d bytes", req, lim)
	}
	if req > 0 {
		return req, nil
	}
	return lim, nil
}

func (c *controller) CreateVolume(ctx context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	if err := checkCaps(req.GetVolumeCapabilities()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	p, err := parseParams(name, req.GetParameters())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	quota, err := capacity(req.GetCapacityRange())
	if err != nil {
		return nil, status.Error(codes.OutOfRange, err.Error())
	}
	id := volumeID{Server: p.Server, Share: p.Share, SubDir: p.SubDir, OnDelete: p.OnDelete}
	b, unlock, err := c.volume(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	src := req.GetVolumeContentSource()
	var from admin.Clone
	if src != nil {
		switch {
		case src.GetSnapshot() != nil:
			sid, err := parseSnapshotID(src.GetSnapshot().GetSnapshotId())
			if err != nil {
				return nil, status.Error(codes.NotFound, err.Error())
			}
			if sid.Server != p.Server {
				return nil, status.Errorf(codes.InvalidArgument, "snapshot %s is on server %s, the volume would be on %s", sid, sid.Server, p.Server)
			}
			from.FromSnapshot = sid.ID
		case src.GetVolume() != nil:
			vid, err := parseVolumeID(src.GetVolume().GetVolumeId())
			if err != nil {
				return nil, status.Error(codes.NotFound, err.Error())
			}
			if vid.Server != p.Server {
				return nil, status.Errorf(codes.InvalidArgument, "volume %s is on server %s, the clone would be on %s", vid, vid.Server, p.Server)
			}
			from.FromVolume = vid.adminPath()
		default:
			return nil, status.Error(codes.InvalidArgument, "unknown volume content source")
		}
	}

	if from != (admin.Clone{}) && b.admin == nil {
		return nil, status.Errorf(codes.InvalidArgument, "server %s has no admin API: clones need the nfsrdma export server", p.Server)
	}
	if b.admin != nil {
		// source must exist (NotFound), checked before anything is made
		if from.FromSnapshot != "" {
			if _, err := b.admin.GetSnapshot(ctx, from.FromSnapshot); err != nil {
				return nil, toStatus(err, "source snapshot")
			}
		}
		if from.FromVolume != "" {
			if _, err := b.admin.GetVolume(ctx, from.FromVolume); err != nil {
				return nil, toStatus(err, "source volume")
			}
		}
		if v, err := b.admin.GetVolume(ctx, id.adminPath()); err == nil {
			if v.QuotaBytes != quota {
				return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes, asked for %d", name, v.QuotaBytes, quota)
			}
			if other := v.Meta[metaVolumeID]; other != "" && other != id.String() {
				return nil, status.Errorf(codes.AlreadyExists, "directory %s belongs to volume %s", id.Path(), other)
			}
		} else if !errors.Is(err, admin.ErrNotFound) {
			return nil, toStatus(err, "admin")
		}
	}
	if b.admin == nil {
		if err := c.makeDir(ctx, b, p.SubDir, p.Mode); err != nil {
			if codeOf(err) == codes.Unavailable {
				c.be.drop(b)
			}
			return nil, toStatus(err, "create volume directory")
		}
		if quota > 0 {
			klog.InfoS("controller: capacity not enforced: the server has no admin API", "volume", name, "server", p.Server, "bytes", quota)
		}
	} else {
		// the server makes the directory: the controller has no NFS
		// access to its root
		if _, err := b.admin.CreateVolume(ctx, id.adminPath(), quota, p.Mode, map[string]string{metaVolumeID: id.String()}); err != nil {
			return nil, toStatus(err, "create volume")
		}
		if from != (admin.Clone{}) {
			from.Dest = id.adminPath()
			if err := c.waitClone(ctx, b, from); err != nil {
				return nil, err
			}
		}
	}
	klog.InfoS("controller: volume created", "name", name, "id", id.String(), "bytes", quota, "source", from)
	return &csipb.CreateVolumeResponse{Volume: &csipb.Volume{
		VolumeId:      id.String(),
		CapacityBytes: quota,
		VolumeContext: c.volumeContext(id, p),
		ContentSource: src,
	}}, nil
}

// volumeContext is what NodePublishVolume needs besides the volume ID.
func (c *controller) volumeContext(id volumeID, p volumeParams) map[string]string {
	port := c.cfg.Ports.RDMA
	if p.Transport == "tcp" {
		port = c.cfg.Ports.NFS
	}
	opts := fmt.Sprintf("proto=%s,port=%d,mountport=%d", p.Transport, port, c.cfg.Ports.Mount)
	if c.cfg.Ports.NLM > 0 {
		opts += ",lockport=" + strconv.Itoa(c.cfg.Ports.NLM)
	}
	return map[string]string{
		ctxServer:       id.Server,
		ctxExport:       id.Path(),
		ctxTransport:    p.Transport,
		ctxCredits:      strconv.Itoa(p.CreditsPerPod),
		ctxMountOptions: opts,
	}
}

// makeDir creates subDir (and missing parents, mode 0755) under the
// share's root; the last component gets mode exactly. An existing
// directory is kept (CreateVolume is idempotent) and its mode set.
func (c *controller) makeDir(ctx context.Context, b *backend, subDir string, mode uint32) error {
	dir := b.nfs.Root()
	comps := strings.Split(subDir, "/")
	for i, name := range comps {
		last := i == len(comps)-1
		m := uint32(0o755)
		if last {
			m = mode
		}
		res, err := b.nfs.Lookup(ctx, dir, name)
		if err == nil {
			if res.ObjAttr.Set && res.ObjAttr.Attr.Type != nfs3.TypeDir {
				return fmt.Errorf("%s: %w", path.Join(comps[:i+1]...), nfs3.ErrNotDir)
			}
			dir = res.Object
			if last {
				_, err = b.nfs.Chmod(ctx, dir, mode)
				return err
			}
			continue
		}
		if !errors.Is(err, nfs3.ErrNoEnt) {
			return err
		}
		fh, _, err := b.nfs.MakeDir(ctx, dir, name, m)
		if errors.Is(err, nfs3.ErrExist) { // a concurrent creator
			res, err = b.nfs.Lookup(ctx, dir, name)
			fh = res.Object
		}
		if err != nil {
			return err
		}
		if last {
			// MKDIR's mode may be masked by a server's umask (knfsd
			// honours it as given, Ganesha too; set it to be sure)
			if _, err := b.nfs.Chmod(ctx, fh, mode); err != nil {
				return err
			}
		}
		dir = fh
	}
	return nil
}

// waitClone starts (or finds) the server-side copy into a new volume and
// waits for it, at most until shortly before ctx's deadline (and 30 s):
// a large copy returns Aborted with its progress, and the CO's retry of
// CreateVolume finds the same job further along.
func (c *controller) waitClone(ctx context.Context, b *backend, cl admin.Clone) error {
	wait := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		if w := time.Until(dl) - 2*time.Second; w < wait {
			wait = w
		}
	}
	deadline := time.Now().Add(wait)
	j, err := b.admin.CreateClone(ctx, cl)
	for {
		if err != nil {
			return toStatus(err, "clone")
		}
		if j.Error != "" {
			return status.Errorf(codes.Internal, "clone into %s failed: %s", cl.Dest, j.Error)
		}
		if j.Ready {
			return nil
		}
		if time.Now().After(deadline) {
			return status.Errorf(codes.Aborted, "clone into %s in progress: %d of %d bytes copied", cl.Dest, j.CopiedBytes, j.SizeBytes)
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-time.After(100 * time.Millisecond):
		}
		j, err = b.admin.GetClone(ctx, cl.Dest)
	}
}

func (c *controller) DeleteVolume(ctx context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	id, err := parseVolumeID(req.GetVolumeId())
	if err != nil {
		klog.InfoS("controller: DeleteVolume of an id that is not ours: nothing to do", "id", req.GetVolumeId(), "err", err)
		return &csipb.DeleteVolumeResponse{}, nil
	}
	b, unlock, err := c.volume(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if b.admin != nil {
		// the export goes first (no node keeps access to a volume being
		// deleted), then the server disposes of the directory
		how := admin.DirectoryDelete
		switch id.OnDelete {
		case onDeleteRetain:
			how = admin.DirectoryRetain
		case onDeleteArchive:
			how = admin.DirectoryArchive
		}
		if err := b.admin.DeleteVolume(ctx, id.adminPath(), how); err != nil {
			return nil, toStatus(err, "delete volume")
		}
		klog.InfoS("controller: volume deleted", "id", id.String(), "onDelete", id.OnDelete)
		return &csipb.DeleteVolumeResponse{}, nil
	}
	switch id.OnDelete {
	case onDeleteRetain:
	case onDeleteArchive:
		err = c.archive(ctx, b, id.SubDir)
	default:
		err = c.removeDir(ctx, b, id.SubDir)
	}
	if err != nil && !errors.Is(err, nfs3.ErrNoEnt) {
		if codeOf(err) == codes.Unavailable {
			c.be.drop(b)
		}
		return nil, toStatus(err, "delete volume directory")
	}
	klog.InfoS("controller: volume deleted", "id", id.String(), "onDelete", id.OnDelete)
	return &csipb.DeleteVolumeResponse{}, nil
}

// parentOf looks up the directory holding subDir's last component.
func (c *controller) parentOf(ctx context.Context, b *backend, subDir string) (nfs3.FH, string, error) {
	dir, name := path.Split(subDir)
	fh := b.nfs.Root()
	if dir != "" {
		var err error
		fh, _, err = b.nfs.LookupPath(ctx, b.nfs.Root(), strings.TrimSuffix(dir, "/"), false)
		if err != nil {
			return nfs3.FH{}, "", err
		}
	}
	return fh, name, nil
}

// archive renames the volume directory to "archived-NAME" beside it, as
// csi-driver-nfs's onDelete=archive (an older archive of the same name is
// replaced only when empty; otherwise a timestamp is appended).
func (c *controller) archive(ctx context.Context, b *backend, subDir string) error {
	dir, name, err := c.parentOf(ctx, b, subDir)
	if err != nil {
		return err
	}
	to := "archived-" + name
	_, err = b.nfs.Rename(ctx, dir, name, dir, to)
	if errors.Is(err, nfs3.ErrExist) || errors.Is(err, nfs3.ErrNotEmpty) {
		to = fmt.Sprintf("archived-%s-%d", name, time.Now().Unix())
		_, err = b.nfs.Rename(ctx, dir, name, dir, to)
	}
	return err
}

// removeDir removes subDir and everything below it over NFS (READDIRPLUS,
// REMOVE, RMDIR), depth first.
func (c *controller) removeDir(ctx context.Context, b *backend, subDir string) error {
	dir, name, err := c.parentOf(ctx, b, subDir)
	if err != nil {
		return err
	}
	return removeAll(ctx, b, dir, name, 0)
}

const maxRemoveDepth = 256

func removeAll(ctx context.Context, b *backend, dir nfs3.FH, name string, depth int) error {
	res, err := b.nfs.Lookup(ctx, dir, name)
	if err != nil {
		return err
	}
	if res.ObjAttr.Set && res.ObjAttr.Attr.Type != nfs3.TypeDir {
		_, err := b.nfs.Remove(ctx, dir, name)
		return err
	}
	if depth > maxRemoveDepth {
		return fmt.Errorf("remove %s: deeper than %d levels", name, maxRemoveDepth)
	}
	for {
		var names []string
		var dirs []bool
		for e, err := range b.nfs.Readdirplus(ctx, res.Object) {
			if err != nil {
				return err
			}
			if e.Name == "." || e.Name == ".." {
				continue
			}
			names = append(names, e.Name)
			dirs = append(dirs, !e.Attr.Set || e.Attr.Attr.Type == nfs3.TypeDir)
			if len(names) >= 4096 {
				break
			}
		}
		if len(names) == 0 {
			break
		}
		for i, n := range names {
			if dirs[i] {
				err = removeAll(ctx, b, res.Object, n, depth+1)
			} else {
				_, err = b.nfs.Remove(ctx, res.Object, n)
			}
			if err != nil && !errors.Is(err, nfs3.ErrNoEnt) {
				return err
			}
		}
	}
	_, err = b.nfs.Rmdir(ctx, dir, name)
	return err
}

func (c *controller) ValidateVolumeCapabilities(ctx context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	id, err := parseVolumeID(req.GetVolumeId())
	if err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	b, err := c.be.get(ctx, id.Server, id.Share)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if err := c.exists(ctx, b, id); err != nil {
		return nil, err
	}
	if err := checkCaps(req.GetVolumeCapabilities()); err != nil {
		return &csipb.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// volume serialises the calls on volume id (unlock when done) and returns
// the backend of its server and share (Unavailable when unreachable).
func (c *controller) volume(ctx context.Context, id volumeID) (b *backend, unlock func(), err error) {
	unlock, err = c.locks.lock(ctx, "volume/"+id.Server+id.Path())
	if err != nil {
		return nil, nil, err
	}
	b, err = c.be.get(ctx, id.Server, id.Share)
	if err != nil {
		unlock()
		return nil, nil, status.Error(codes.Unavailable, err.Error())
	}
	return b, unlock, nil
}

// exists checks that volume id is there on b: registered on our export
// server, or its directory on a third-party one (NotFound otherwise).
func (c *controller) exists(ctx context.Context, b *backend, id volumeID) error {
	if b.admin != nil {
		_, err := b.admin.GetVolume(ctx, id.adminPath())
		return toStatus(err, "volume "+id.String())
	}
	_, _, err := b.nfs.LookupPath(ctx, b.nfs.Root(), id.SubDir, false)
	return toStatus(err, "volume "+id.String())
}
