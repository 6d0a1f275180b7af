package csi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	mountutils "k8s.io/mount-utils"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/credits"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/mounter"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

// node is the CSI Node service: one FUSE mount per NodePublishVolume
// (per pod), served by the mounter.
type node struct {
	csipb.UnimplementedNodeServer
	cfg    Config
	mnt    *mounter.Client
	keeper *mounter.Keeper // nil: none
	locks  *keyLocks
}

func newNode(cfg Config) *node {
	n := &node{cfg: cfg, mnt: &mounter.Client{Socket: cfg.MounterSocket}, locks: newKeyLocks()}
	if cfg.KeeperSocket != "" {
		n.keeper = &mounter.Keeper{Socket: cfg.KeeperSocket}
	}
	return n
}

// reclaimFor bounds how long a starting node plugin retries taking the
// duplicates of the mounts the mounter serves (the mounter may be
// starting too).
const reclaimFor = 2 * time.Minute

// start runs the keeper and, in the background, logs the mounts the
// mounter serves (those that survived a restart of this plugin) and keeps
// a duplicate of each one's connection.
func (n *node) start(ctx context.Context) {
	if n.keeper != nil {
		go func() {
			if err := n.keeper.Run(ctx); err != nil {
				klog.ErrorS(err, "node: keeper stopped: a death of the mounter's container ends the node's mounts")
			}
		}()
	}
	go func() {
		deadline := time.Now().Add(reclaimFor)
		for {
			err := n.reclaim(ctx)
			if err == nil || ctx.Err() != nil {
				return
			}
			if time.Now().After(deadline) {
				klog.ErrorS(err, "node: mounter not reachable: the connections of the mounts it serves are not kept", "socket", n.cfg.MounterSocket)
				return
			}
			klog.V(2).InfoS("node: mounter not reachable yet", "socket", n.cfg.MounterSocket, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
		}
	}()
}

// reclaim lists the mounts the mounter serves and keeps a duplicate of
// the connection of each one the keeper lacks and this node still has
// mounted (OpDuplicate).
func (n *node) reclaim(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ms, err := n.mnt.List(lctx)
	cancel()
	if err != nil {
		return err
	}
	kept := map[string]bool{}
	if n.keeper != nil {
		for _, t := range n.keeper.Kept() {
			kept[t] = true
		}
	}
	for _, m := range ms {
		klog.InfoS("node: mount still served", "target", m.Target, "source", m.Source, "pid", m.PID, "volume", m.VolumeID)
		if n.keeper == nil || kept[m.Target] {
			continue
		}
		if kept, err := n.keepServed(ctx, m.Target); err != nil {
			klog.ErrorS(err, "node: no duplicate of a served connection: a death of the mounter's container would end this mount", "target", m.Target)
		} else if kept {
			klog.InfoS("node: keeping the connection of a served mount", "target", m.Target)
		}
	}
	return nil
}

// keepServed keeps a duplicate of the connection the mounter serves on
// target, under target's lock, while target is still mounted, and
// reports whether it did.
func (n *node) keepServed(ctx context.Context, target string) (bool, error) {
	unlock, err := n.locks.lock(ctx, "target/"+target)
	if err != nil {
		return false, err
	}
	defer unlock()
	if mi, ok, err := mountAt(target); err != nil || !ok || mi.FsType != fuseType {
		return false, err // unmounted meanwhile: nothing to keep
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	f, err := n.mnt.Duplicate(dctx, target)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := n.keeper.Keep(target, f); err != nil {
		return false, err
	}
	return true, nil
}

// probe reports whether the node plugin is ready: when its mounter
// answers. With a keeper, always: the probe drives the plugin's liveness
// (the chart's), and a restart of the plugin while the mounter is down
// would let the kept connections go, ending the mounts the restarted
// mounter is to take up again; the mounter has probes of its own.
func (n *node) probe(ctx context.Context) error {
	if n.keeper != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := n.mnt.List(ctx)
	return err
}

func (n *node) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: n.cfg.NodeName + "@" + n.cfg.NodeAddress}, nil
}

func (n *node) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	var caps []*csipb.NodeServiceCapability
	for _, t := range []csipb.NodeServiceCapability_RPC_Type{
		csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// checkTarget validates a target path: absolute, clean, under TargetRoot.
func (n *node) checkTarget(p string) (string, error) {
	if p == "" {
		return "", status.Error(codes.InvalidArgument, "target path missing")
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != strings.TrimSuffix(p, "/") {
		return "", status.Errorf(codes.InvalidArgument, "target path %q: want a clean absolute path", p)
	}
	p = filepath.Clean(p)
	if n.cfg.TargetRoot != "" && (!within(p, n.cfg.TargetRoot) || p == filepath.Clean(n.cfg.TargetRoot)) {
		return "", status.Errorf(codes.InvalidArgument, "target path %q is outside %s", p, n.cfg.TargetRoot)
	}
	return p, nil
}

// publishSpec is what a publish mounts.
type publishSpec struct {
	source  string // SERVER:/EXPORT
	options string // driver mount -o
	machine string // AUTH_SYS machine name: the pod
	podUID  string
	ro      bool
	rdma    bool // proto=rdma: credits apply
}

// spec derives the mount from the volume ID and context: a provisioned
// volume (ID from CreateVolume, context from the controller) or an
// ephemeral inline volume (context: server, share, optional subDir,
// transport and mountOptions, the latter `driver mount -o` options such as
// mountport=20048 for a server without rpcbind).
func (n *node) spec(req *csipb.NodePublishVolumeRequest) (publishSpec, error) {
	vc := req.GetVolumeContext()
	var s publishSpec
	server, export := vc[ctxServer], vc[ctxExport]
	opts := []string{}
	if vc[ctxEphemeral] == "true" {
		server = vc[ParamServer]
		share := vc[ParamShare]
		if share == "" {
			share = "/"
		}
		if server == "" || !path.IsAbs(share) {
			return s, errors.New("ephemeral volume: attributes server and share (an absolute path) are required")
		}
		export = share
		if sd := vc[ParamSubDir]; sd != "" {
			if !cleanRel(sd) {
				return s, fmt.Errorf("ephemeral volume: subDir %q: want a clean relative path", sd)
			}
			export = path.Join(share, sd)
		}
		if t := vc[ParamTransport]; t != "" {
			opts = append(opts, "proto="+t)
		}
		if mo := vc[ctxMountOptions]; mo != "" {
			opts = append(opts, mo)
		}
	} else {
		id, err := parseVolumeID(req.GetVolumeId())
		if err != nil {
			return s, err
		}
		if server == "" {
			server = id.Server
		}
		if export == "" {
			export = id.Path()
		}
		if server != id.Server || export != id.Path() {
			return s, fmt.Errorf("volume context names %s:%s, the volume id %s:%s", server, export, id.Server, id.Path())
		}
		if mo := vc[ctxMountOptions]; mo != "" {
			opts = append(opts, mo)
		}
	}
	if strings.Contains(server, ":") {
		server = "[" + server + "]"
	}
	s.source = server + ":" + export
	share := DefaultCreditsPerPod
	if c := vc[ctxCredits]; c != "" {
		v, err := strconv.Atoi(c)
		if err != nil || v < 1 || v > MaxCreditsPerPod {
			return s, fmt.Errorf("volume context %s=%q: want 1..%d", ctxCredits, c, MaxCreditsPerPod)
		}
		share = v
	}
	opts = append(opts, req.GetVolumeCapability().GetMount().GetMountFlags()...)
	s.ro = req.GetReadonly() || isReaderOnly(req.GetVolumeCapability())
	if s.ro {
		opts = append(opts, "ro")
	}
	mo, err := mountopts.Parse(strings.Join(opts, ","))
	if err != nil {
		return s, err
	}
	s.rdma = mo.Proto == mountopts.ProtoRDMA
	if s.rdma && mo.Credits == 0 {
		// the class's share (validated above), unless the pod's mount
		// options say otherwise
		opts = append(opts, "credits="+strconv.Itoa(share))
	}
	s.options = strings.Join(opts, ",")
	s.podUID = vc[ctxPodUID]
	s.machine = n.cfg.NodeName
	if ns, pod := vc[ctxPodNamespace], vc[ctxPodName]; pod != "" {
		s.machine = credits.MachineName(n.cfg.NodeName, ns, pod)
	}
	return s, nil
}

// NodePublishVolume mounts the volume on the target for one pod: its own
// FUSE mount, its own NFS connection (RDMA or TCP) and credit share.
// Idempotent: a healthy mount of the same source is success; a dead one
// (its FUSE server gone) is unmounted and mounted again.
func (n *node) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	target, err := n.checkTarget(req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume capability missing")
	}
	if err := checkCaps([]*csipb.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	sp, err := n.spec(req)
	if err != nil {
		if req.GetVolumeContext()[ctxEphemeral] != "true" && errors.Is(err, errBadID) {
			return nil, status.Error(codes.NotFound, err.Error())
		}
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	unlock, err := n.locks.lock(ctx, "target/"+target)
	if err != nil {
		return nil, err
	}
	defer unlock()

	if mi, ok, err := mountAt(target); err != nil {
		return nil, status.Errorf(codes.Internal, "read mount table: %v", err)
	} else if ok {
		herr := healthy(target, 5*time.Second)
		switch {
		case herr == nil && mi.FsType == fuseType && mi.Source == sp.source:
			return &csipb.NodePublishVolumeResponse{}, nil
		case herr == nil:
			return nil, status.Errorf(codes.AlreadyExists, "%s is mounted from %s (%s), not %s", target, mi.Source, mi.FsType, sp.source)
		default:
			klog.InfoS("node: repairing a dead mount", "target", target, "source", mi.Source, "err", herr, "corrupted", mountutils.IsCorruptedMnt(herr))
			if err := unmount(target, time.Second); err != nil {
				return nil, status.Errorf(codes.Internal, "unmount dead mount %s: %v", target, err)
			}
			n.forgetKept(target)
			_ = n.mnt.Release(ctx, target, 2*time.Second)
		}
	}
	if req.GetVolumeCapability().GetAccessMode().GetMode() == csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
		ms, err := n.mnt.List(ctx)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "mounter: %v", err)
		}
		for _, m := range ms {
			if m.VolumeID == req.GetVolumeId() && m.Target != target {
				return nil, status.Errorf(codes.FailedPrecondition, "single-writer volume %s is already published at %s", m.VolumeID, m.Target)
			}
		}
	}
	// after the idempotent return above: a publish of a healthy mount
	// neither waits for the ledger nor fails on its grant
	if err := n.ledgerCredits(ctx, req, &sp); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "create target: %v", err)
	}
	fd, err := mountFUSE(sp.source, target, sp.ro)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	defer fd.Close()
	m, err := n.mnt.Mount(ctx, mounter.Mount{
		Target: target, Source: sp.source, Options: sp.options, MachineName: sp.machine,
		LockCallerName: n.cfg.NodeName, VolumeID: req.GetVolumeId(), PodUID: sp.podUID,
	}, fd)
	if err != nil {
		fd.Close() // abort the FUSE connection, then take the mount away
		if uerr := unix.Unmount(target, unix.MNT_DETACH); uerr != nil {
			klog.ErrorS(uerr, "node: remove failed mount", "target", target)
		}
		if codeOf(err) == codes.NotFound {
			return nil, status.Errorf(codes.NotFound, "volume %s is gone from its server (its directory was removed there): mount %s: %v",
				req.GetVolumeId(), sp.source, err)
		}
		return nil, toStatus(err, "mount "+sp.source)
	}
	if n.keeper != nil {
		if err := n.keeper.Keep(target, fd); err != nil {
			klog.ErrorS(err, "node: connection not kept: a death of the mounter's container would end this mount", "target", target)
		}
	}
	klog.InfoS("node: volume published", "volume", req.GetVolumeId(), "target", target, "source", sp.source, "options", sp.options, "pid", m.PID, "pod", sp.podUID)
	return &csipb.NodePublishVolumeResponse{}, nil
}

// forgetKept closes the keeper's duplicate of target's connection, once
// target is unmounted.
func (n *node) forgetKept(target string) {
	if n.keeper != nil {
		n.keeper.Forget(target)
	}
}

// NodeUnpublishVolume unmounts the target within UnmountTimeout (then
// lazily: a pod never stays Terminating because a server is gone), ends
// its FUSE server and removes the target directory.
func (n *node) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	target, err := n.checkTarget(req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	unlock, err := n.locks.lock(ctx, "target/"+target)
	if err != nil {
		return nil, err
	}
	defer unlock()
	for {
		mi, ok, err := mountAt(target)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "read mount table: %v", err)
		}
		if !ok {
			break
		}
		if mi.FsType != fuseType {
			return nil, status.Errorf(codes.FailedPrecondition, "%s is a %s mount, not ours", target, mi.FsType)
		}
		if err := unmount(target, n.cfg.UnmountTimeout); err != nil {
			return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
		}
	}
	n.forgetKept(target)
	if err := n.mnt.Release(ctx, target, n.cfg.UnmountTimeout); err != nil {
		klog.InfoS("node: mounter release failed (the process ends by itself once unmounted)", "target", target, "err", err)
	}
	if err := removeTarget(target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	klog.InfoS("node: volume unpublished", "volume", req.GetVolumeId(), "target", target)
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports bytes and inodes of a published volume from
// statfs(2) of its mount, which FUSE answers from NFS FSSTAT: for a
// volume with a quota, total = quota and available = what is left of it.
func (n *node) NodeGetVolumeStats(ctx context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	p := req.GetVolumePath()
	if p == "" {
		return nil, status.Error(codes.InvalidArgument, "volume path missing")
	}
	mi, ok, err := mountAt(filepath.Clean(p))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "read mount table: %v", err)
	}
	if !ok {
		if _, err := os.Stat(p); err != nil {
			return nil, status.Errorf(codes.NotFound, "volume path %s: %v", p, err)
		}
		return nil, status.Errorf(codes.NotFound, "volume path %s is not mounted", p)
	}
	var st unix.Statfs_t
	errc := make(chan error, 1)
	go func() { errc <- unix.Statfs(p, &st) }()
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		err = errors.New("statfs: no answer within 10s")
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%s (from %s): %v", p, mi.Source, err)
	}
	bs := int64(st.Bsize)
	return &csipb.NodeGetVolumeStatsResponse{
		Usage: []*csipb.VolumeUsage{
			{Unit: csipb.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
			{Unit: csipb.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
		},
	}, nil
}

// ledgerCredits makes the pod's mount ask for the credits the controller
// granted the pod in the ledger (after any mount option, so a pod cannot
// ask for more); a refused pod (0 credits) is ResourceExhausted, which
// kubelet retries until the budget frees up. Without a ledger (no API
// client, no pod information, or no entry within 10 s) the StorageClass's
// creditsPerPod stands.
func (n *node) ledgerCredits(ctx context.Context, req *csipb.NodePublishVolumeRequest, sp *publishSpec) error {
	vc := req.GetVolumeContext()
	if n.cfg.Kube == nil || vc[ctxPodName] == "" || !sp.rdma {
		return nil
	}
	server := strings.Trim(sp.source[:strings.LastIndex(sp.source, ":/")], "[]")
	e, err := credits.Lookup(ctx, n.cfg.Kube, n.cfg.LedgerNamespace, n.cfg.LedgerName, vc[ctxPodNamespace], vc[ctxPodName], server, cmp.Or(n.cfg.LedgerWait, 10*time.Second))
	if err != nil {
		klog.InfoS("node: no credit grant for the pod; using the StorageClass share", "pod", vc[ctxPodNamespace]+"/"+vc[ctxPodName], "err", err)
		return nil
	}
	if e.Granted <= 0 {
		return status.Errorf(codes.ResourceExhausted, "pod %s has no RPC-over-RDMA credits on %s: the server's budget is taken (see the ledger %s/%s)",
			e.Pod, server, n.cfg.LedgerNamespace, n.cfg.LedgerName)
	}
	sp.options += ",credits=" + strconv.Itoa(e.Granted)
	klog.V(2).InfoS("node: credits from the ledger", "pod", e.Pod, "server", server, "granted", e.Granted, "desired", e.Desired)
	return nil
}
