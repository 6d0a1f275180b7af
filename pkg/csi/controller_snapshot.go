package csi

import (
	"context"
	"errors"
	"sort"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// CreateSnapshot copies the volume on the export server (a background
// job there). It waits a little for small volumes; a large copy answers
// ready_to_use=false, and the snapshotter calls again (same name, same
// job) until it is ready, so the copy never hits a call timeout.
func (c *controller) CreateSnapshot(ctx context.Context, req *csipb.CreateSnapshotRequest) (*csipb.CreateSnapshotResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	if req.GetSourceVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "source volume id missing")
	}
	if len(req.GetParameters()) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "snapshots take no parameters, got %v", req.GetParameters())
	}
	vid, err := parseVolumeID(req.GetSourceVolumeId())
	if err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	unlock, err := c.locks.lock(ctx, "snapshot/"+req.GetName())
	if err != nil {
		return nil, err
	}
	defer unlock()
	b, err := c.be.get(ctx, vid.Server, vid.Share)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if b.admin == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "server %s has no admin API: snapshots need the nfsrdma export server", vid.Server)
	}
	sid := snapshotID{Server: vid.Server, ID: serverSnapshotID(req.GetName())}
	s, err := b.admin.CreateSnapshot(ctx, sid.ID, vid.adminPath())
	wait := time.Now().Add(10 * time.Second)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl)-2*time.Second < 10*time.Second {
		wait = dl.Add(-2 * time.Second)
	}
	for err == nil && !s.Ready && s.Error == "" && time.Now().Before(wait) {
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(100 * time.Millisecond):
		}
		s, err = b.admin.GetSnapshot(ctx, sid.ID)
	}
	if err != nil {
		if errors.Is(err, admin.ErrExists) {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %q exists with another source volume", req.GetName())
		}
		return nil, toStatus(err, "snapshot")
	}
	if s.Error != "" {
		return nil, status.Errorf(codes.Internal, "snapshot %q: copy failed: %s", req.GetName(), s.Error)
	}
	klog.InfoS("controller: snapshot", "name", req.GetName(), "id", sid.String(), "ready", s.Ready, "copied", s.CopiedBytes, "of", s.SizeBytes)
	return &csipb.CreateSnapshotResponse{Snapshot: c.snapshot(sid, req.GetSourceVolumeId(), s)}, nil
}

func (c *controller) snapshot(sid snapshotID, source string, s admin.Snapshot) *csipb.Snapshot {
	return &csipb.Snapshot{
		SnapshotId:     sid.String(),
		SourceVolumeId: source,
		SizeBytes:      s.SizeBytes,
		CreationTime:   timestamppb.New(s.CreatedAt),
		ReadyToUse:     s.Ready,
	}
}

func (c *controller) DeleteSnapshot(ctx context.Context, req *csipb.DeleteSnapshotRequest) (*csipb.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot id missing")
	}
	sid, err := parseSnapshotID(req.GetSnapshotId())
	if err != nil {
		return &csipb.DeleteSnapshotResponse{}, nil
	}
	a := c.be.adminClient(sid.Server)
	if a == nil {
		return &csipb.DeleteSnapshotResponse{}, nil
	}
	if err := a.DeleteSnapshot(ctx, sid.ID); err != nil && !errors.Is(err, admin.ErrNotFound) {
		return nil, toStatus(err, "delete snapshot")
	}
	klog.InfoS("controller: snapshot deleted", "id", sid.String())
	return &csipb.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists the snapshots of the known servers, filtered by
// snapshot or source volume, sorted by ID, paginated like ListVolumes.
func (c *controller) ListSnapshots(ctx context.Context, req *csipb.ListSnapshotsRequest) (*csipb.ListSnapshotsResponse, error) {
	var servers []string
	var want *snapshotID
	if req.GetSnapshotId() != "" {
		sid, err := parseSnapshotID(req.GetSnapshotId())
		if err != nil {
			return &csipb.ListSnapshotsResponse{}, nil
		}
		want, servers = &sid, []string{sid.Server}
	} else {
		var err error
		if servers, err = c.be.servers(); err != nil {
			return nil, err
		}
	}
	var wantSrc *volumeID
	if req.GetSourceVolumeId() != "" {
		vid, err := parseVolumeID(req.GetSourceVolumeId())
		if err != nil {
			return &csipb.ListSnapshotsResponse{}, nil
		}
		wantSrc = &vid
	}
	var all []*csipb.Snapshot
	for _, srv := range servers {
		a := c.be.adminClient(srv)
		if a == nil {
			continue
		}
		var snaps []admin.Snapshot
		if want != nil {
			s, err := a.GetSnapshot(ctx, want.ID)
			if errors.Is(err, admin.ErrNotFound) {
				return &csipb.ListSnapshotsResponse{}, nil
			}
			if err != nil {
				return nil, toStatus(err, "snapshot")
			}
			snaps = []admin.Snapshot{s}
		} else {
			var err error
			if snaps, err = a.ListSnapshots(ctx); err != nil {
				return nil, status.Errorf(codes.Unavailable, "list snapshots of %s: %v", srv, err)
			}
		}
		// the source's CSI volume ID, from the volume's metadata
		vols, err := a.ListVolumes(ctx)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "list volumes of %s: %v", srv, err)
		}
		byPath := map[string]string{}
		for _, v := range vols {
			byPath[v.Path] = v.Meta[metaVolumeID]
		}
		for _, s := range snaps {
			src := s.SourceMeta[metaVolumeID]
			if src == "" {
				src = byPath[s.Source]
			}
			if wantSrc != nil && (srv != wantSrc.Server || src != wantSrc.String()) {
				continue
			}
			all = append(all, c.snapshot(snapshotID{Server: srv, ID: s.ID}, src, s))
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].SnapshotId < all[j].SnapshotId })
	start, end, next, err := page(len(all), req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csipb.ListSnapshotsResponse{NextToken: next}
	for _, s := range all[start:end] {
		resp.Entries = append(resp.Entries, &csipb.ListSnapshotsResponse_Entry{Snapshot: s})
	}
	return resp, nil
}

// GetSnapshot returns one snapshot (NotFound when the server has none by
// that ID); the snapshotter polls it while a copy is in progress.
func (c *controller) GetSnapshot(ctx context.Context, req *csipb.GetSnapshotRequest) (*csipb.GetSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot id missing")
	}
	list, err := c.ListSnapshots(ctx, &csipb.ListSnapshotsRequest{SnapshotId: req.GetSnapshotId()})
	if err != nil {
		return nil, err
	}
	if len(list.GetEntries()) == 0 {
		return nil, status.Errorf(codes.NotFound, "snapshot %s not found", req.GetSnapshotId())
	}
	return &csipb.GetSnapshotResponse{Snapshot: list.GetEntries()[0].GetSnapshot()}, nil
}
