package csi

import (
	"context"
	"errors"
	"net/netip"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// parseNodeID splits a node ID "NAME@ADDRESS" (what NodeGetInfo reports)
// into the name and the address the export ACL grants.
func parseNodeID(s string) (name string, addr netip.Addr, err error) {
	name, a, ok := strings.Cut(s, "@")
	if !ok || name == "" {
		return "", netip.Addr{}, errors.New("node id " + s + ": want NAME@ADDRESS")
	}
	addr, err = netip.ParseAddr(a)
	if err != nil {
		return "", netip.Addr{}, errors.New("node id " + s + ": bad address")
	}
	return name, addr, nil
}

// ControllerPublishVolume grants the node's address access to the
// volume's export on the export server (read-only when asked), so the
// node's mounts can MOUNT it and use its file handles.
func (c *controller) ControllerPublishVolume(ctx context.Context, req *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	if req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "node id missing")
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume capability missing")
	}
	if err := checkCaps([]*csipb.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	id, err := parseVolumeID(req.GetVolumeId())
	if err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	name, addr, err := parseNodeID(req.GetNodeId())
	if err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	b, unlock, err := c.volume(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if b.admin == nil {
		// a third-party server: its exports file decides who may mount
		if err := c.exists(ctx, b, id); err != nil {
			return nil, err
		}
		return &csipb.ControllerPublishVolumeResponse{}, nil
	}
	v, err := b.admin.GetVolume(ctx, id.adminPath())
	if err != nil {
		return nil, toStatus(err, "volume "+id.String())
	}
	ro := req.GetReadonly() || isReaderOnly(req.GetVolumeCapability())
	for _, a := range v.Access {
		if a.Node == req.GetNodeId() {
			if a.ReadOnly != ro {
				return nil, status.Errorf(codes.AlreadyExists, "volume %s is published to node %s with readonly=%v", id, a.Node, a.ReadOnly)
			}
			return &csipb.ControllerPublishVolumeResponse{}, nil
		}
	}
	if err := b.admin.Grant(ctx, id.adminPath(), admin.Access{Node: req.GetNodeId(), Name: name, Addrs: []string{addr.String()}, ReadOnly: ro}); err != nil {
		return nil, toStatus(err, "grant")
	}
	klog.InfoS("controller: volume published", "volume", id.String(), "node", req.GetNodeId(), "readonly", ro)
	return &csipb.ControllerPublishVolumeResponse{}, nil
}

func isReaderOnly(vc *csipb.VolumeCapability) bool {
	switch vc.GetAccessMode().GetMode() {
	case csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true
	}
	return false
}

// ControllerUnpublishVolume revokes the node's access (every node's when
// no node is named). A volume or node that is not there is unpublished
// already: OK.
func (c *controller) ControllerUnpublishVolume(ctx context.Context, req *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	id, err := parseVolumeID(req.GetVolumeId())
	if err != nil {
		return &csipb.ControllerUnpublishVolumeResponse{}, nil
	}
	b, unlock, err := c.volume(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if b.admin == nil {
		return &csipb.ControllerUnpublishVolumeResponse{}, nil
	}
	nodes := []string{req.GetNodeId()}
	if req.GetNodeId() == "" {
		v, err := b.admin.GetVolume(ctx, id.adminPath())
		if errors.Is(err, admin.ErrNotFound) {
			return &csipb.ControllerUnpublishVolumeResponse{}, nil
		}
		if err != nil {
			return nil, toStatus(err, "volume")
		}
		nodes = nodes[:0]
		for _, a := range v.Access {
			nodes = append(nodes, a.Node)
		}
	}
	for _, n := range nodes {
		if err := b.admin.Revoke(ctx, id.adminPath(), n); err != nil && !errors.Is(err, admin.ErrNotFound) {
			return nil, toStatus(err, "revoke")
		}
	}
	klog.InfoS("controller: volume unpublished", "volume", id.String(), "nodes", nodes)
	return &csipb.ControllerUnpublishVolumeResponse{}, nil
}
