package csi

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// page cuts a sorted list by a starting token (the index of the first
// entry, as a decimal string) and max entries; a token that is not one
// of ours is Aborted, as the spec says.
func page(n int, token string, max int32) (start, end int, next string, err error) {
	if max < 0 {
		return 0, 0, "", status.Error(codes.InvalidArgument, "max_entries is negative")
	}
	if token != "" {
		start, err = strconv.Atoi(token)
		if err != nil || start < 0 || start > n {
			return 0, 0, "", status.Errorf(codes.Aborted, "starting token %q is not valid", token)
		}
	}
	end = n
	if max > 0 && start+int(max) < n {
		end = start + int(max)
		next = strconv.Itoa(end)
	}
	return start, end, next, nil
}

// volumes lists the volumes of every known server with an admin API, by
// their CSI IDs, sorted.
func (c *controller) volumes(ctx context.Context) ([]admin.Volume, error) {
	servers, err := c.be.servers()
	if err != nil {
		return nil, err
	}
	var out []admin.Volume
	for _, s := range servers {
		a := c.be.adminClient(s)
		if a == nil {
			continue
		}
		vs, err := a.ListVolumes(ctx)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "list volumes of %s: %v", s, err)
		}
		for _, v := range vs {
			if v.Meta[metaVolumeID] != "" {
				out = append(out, v)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Meta[metaVolumeID] < out[j].Meta[metaVolumeID] })
	return out, nil
}

func publishedNodes(v admin.Volume) []string {
	var n []string
	for _, a := range v.Access {
		n = append(n, a.Node)
	}
	return n
}

func (c *controller) ListVolumes(ctx context.Context, req *csipb.ListVolumesRequest) (*csipb.ListVolumesResponse, error) {
	vs, err := c.volumes(ctx)
	if err != nil {
		return nil, err
	}
	start, end, next, err := page(len(vs), req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csipb.ListVolumesResponse{NextToken: next}
	for _, v := range vs[start:end] {
		resp.Entries = append(resp.Entries, &csipb.ListVolumesResponse_Entry{
			Volume: &csipb.Volume{VolumeId: v.Meta[metaVolumeID], CapacityBytes: v.QuotaBytes},
			Status: &csipb.ListVolumesResponse_VolumeStatus{
				PublishedNodeIds: publishedNodes(v),
			},
		})
	}
	return resp, nil
}

func usage(v admin.Volume) string {
	if v.QuotaBytes == 0 {
		return fmt.Sprintf("%d bytes, %d inodes used; no quota", v.UsedBytes, v.UsedInodes)
	}
	return fmt.Sprintf("%d of %d bytes used, %d inodes", v.UsedBytes, v.QuotaBytes, v.UsedInodes)
}

func (c *controller) ControllerGetVolume(ctx context.Context, req *csipb.ControllerGetVolumeRequest) (*csipb.ControllerGetVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	id, err := parseVolumeID(req.GetVolumeId())
	if err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	b, err := c.be.get(ctx, id.Server, id.Share)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	resp := &csipb.ControllerGetVolumeResponse{
		Volume: &csipb.Volume{VolumeId: id.String()},
		Status: &csipb.ControllerGetVolumeResponse_VolumeStatus{},
	}
	if b.admin != nil {
		v, err := b.admin.GetVolume(ctx, id.adminPath())
		if err != nil {
			return nil, toStatus(err, "volume "+id.String())
		}
		resp.Volume.CapacityBytes = v.QuotaBytes
		resp.Status.PublishedNodeIds = publishedNodes(v)
		klog.V(4).InfoS("controller: volume", "id", id.String(), "usage", usage(v))
		return resp, nil
	}
	// the directory itself must still be there
	if _, _, err := b.nfs.LookupPath(ctx, b.nfs.Root(), id.SubDir, false); err != nil {
		return nil, toStatus(err, "volume "+id.String())
	}
	return resp, nil
}

// GetCapacity reports the bytes available on the server and share of the
// parameters (FSSTAT abytes), or the sum over the known servers.
func (c *controller) GetCapacity(ctx context.Context, req *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	var servers []string
	share := "/"
	if len(req.GetParameters()) > 0 {
		p, err := parseParams("capacity", req.GetParameters())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		servers, share = []string{p.Server}, p.Share
	} else {
		var err error
		if servers, err = c.be.servers(); err != nil {
			return nil, err
		}
	}
	if len(req.GetVolumeCapabilities()) > 0 {
		if err := checkCaps(req.GetVolumeCapabilities()); err != nil {
			return &csipb.GetCapacityResponse{}, nil // none for what we cannot serve
		}
	}
	var total int64
	for _, s := range servers {
		b, err := c.be.get(ctx, s, share)
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		if b.admin != nil {
			st, err := b.admin.Status(ctx)
			if err != nil {
				return nil, toStatus(err, "admin status")
			}
			total += st.FreeBytes
			continue
		}
		fs, err := b.nfs.Fsstat(ctx, b.nfs.Root())
		if err != nil {
			c.be.drop(b)
			return nil, toStatus(err, "FSSTAT")
		}
		total += int64(fs.ABytes)
	}
	return &csipb.GetCapacityResponse{AvailableCapacity: total}, nil
}

// ControllerExpandVolume raises the volume's quota; a smaller size keeps
// the current one (no shrinking). The mounts see the new size at once
// (FSSTAT of the volume reports the quota): no node step.
func (c *controller) ControllerExpandVolume(ctx context.Context, req *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id missing")
	}
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity range missing")
	}
	size, err := capacity(req.GetCapacityRange())
	if err != nil {
		return nil, status.Error(codes.OutOfRange, err.Error())
	}
	if req.GetVolumeCapability() != nil {
		if err := checkCaps([]*csipb.VolumeCapability{req.GetVolumeCapability()}); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	id, err := parseVolumeID(req.GetVolumeId())
	if err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	b, unlock, err := c.volume(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if b.admin == nil {
		if err := c.exists(ctx, b, id); err != nil {
			return nil, err
		}
		return &csipb.ControllerExpandVolumeResponse{CapacityBytes: size}, nil
	}
	v, err := b.admin.GetVolume(ctx, id.adminPath())
	if err != nil {
		return nil, toStatus(err, "volume "+id.String())
	}
	if v.QuotaBytes == 0 || (size <= v.QuotaBytes && size != 0) {
		return &csipb.ControllerExpandVolumeResponse{CapacityBytes: max(v.QuotaBytes, size)}, nil
	}
	if _, err := b.admin.PutVolume(ctx, id.adminPath(), size, v.Meta); err != nil {
		if errors.Is(err, admin.ErrNotFound) {
			return nil, toStatus(err, "volume")
		}
		return nil, toStatus(err, "set quota")
	}
	klog.InfoS("controller: volume expanded", "volume", id.String(), "from", v.QuotaBytes, "to", size)
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: size}, nil
}
