package volumes

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/internal/atomicfile"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// StateFileName is the registry's file in Options.StateDir.
const StateFileName = "state.json"

// stateVersion is the version of the state file's format.
const stateVersion = 1

// persisted is the state file: what the registry needs to come back after
// a restart. Usage is not kept (it is counted again).
type persisted struct {
	Version   int                 `json:"version"`
	Volumes   []persistedVolume   `json:"volumes"`
	Snapshots []persistedSnapshot `json:"snapshots"`
	Clones    []persistedClone    `json:"clones"`
	// Credits are the RPC-over-RDMA grants per machine name (SetCredits).
	Credits map[string]int `json:"credits,omitempty"`
}

type persistedVolume struct {
	Path       string            `json:"path"`
	QuotaBytes int64             `json:"quotaBytes"`
	Access     []admin.Access    `json:"access"`
	Meta       map[string]string `json:"meta,omitempty"`
}

type persistedSnapshot struct {
	admin.Snapshot
	Deleting bool `json:"deleting,omitempty"`
}

type persistedClone struct {
	admin.Clone
	DestDev uint64 `json:"destDev"`
	DestIno uint64 `json:"destIno"`
}

// init sets up the registry from opts: the state and snapshot
// directories, then the state file's volumes (each resolved and counted;
// one whose directory is missing stays registered but unexported, and is
// logged), snapshots and clones (interrupted copies are queued to start
// again; deletions interrupted are finished).
func (r *Registry) init(opts Options) error {
	r.vols, r.snaps, r.clones = map[string]*Volume{}, map[string]*snapRec{}, map[string]*cloneRec{}
	r.jobs.init(opts.CopyJobs)
	snapDir := opts.SnapshotDir
	if opts.StateDir != "" {
		if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
			return fmt.Errorf("volumes: state directory: %w", err)
		}
		if err := notBeneath(opts.Root, opts.StateDir); err != nil {
			return err
		}
		r.stateFile = filepath.Join(opts.StateDir, StateFileName)
		if snapDir == "" {
			snapDir = filepath.Join(opts.StateDir, "snapshots")
		}
	}
	if snapDir != "" {
		if err := os.MkdirAll(snapDir, 0o700); err != nil {
			return fmt.Errorf("volumes: snapshot directory: %w", err)
		}
		if err := notBeneath(opts.Root, snapDir); err != nil {
			return err
		}
		abs, err := filepath.Abs(snapDir)
		if err != nil {
			return fmt.Errorf("volumes: snapshot directory: %w", err)
		}
		r.snapDir = abs
	}
	if r.stateFile == "" {
		return nil
	}
	data, err := os.ReadFile(r.stateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("volumes: state: %w", err)
	}
	var st persisted
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("volumes: state file %s: %w", r.stateFile, err)
	}
	if st.Version != stateVersion {
		return fmt.Errorf("volumes: state file %s: version %d, want %d", r.stateFile, st.Version, stateVersion)
	}
	if err := checkCredits(st.Credits); err != nil {
		return fmt.Errorf("volumes: state file %s: credits: %w", r.stateFile, err)
	}
	for _, pv := range st.Volumes {
		p, err := volumePath(pv.Path)
		if err != nil {
			return fmt.Errorf("volumes: state file %s: %w", r.stateFile, err)
		}
		v := &Volume{r: r, path: p, access: pv.Access, meta: pv.Meta}
		v.quota.Store(pv.QuotaBytes)
		ex, err := r.resolveVolume(p)
		if err == nil {
			err = r.recount(v, p)
		}
		if err != nil {
			klog.ErrorS(err, "volumes: volume not exported (PutVolume resolves it again)", "volume", p)
		} else {
			v.dir = ex
		}
		r.vols[p] = v
		klog.InfoS("volumes: volume restored", "volume", p, "quotaBytes", pv.QuotaBytes,
			"usedBytes", v.used.Load(), "usedInodes", v.inodes.Load(), "nodes", len(v.access), "exported", v.dir != nil)
	}
	for _, ps := range st.Snapshots {
		sr := &snapRec{Snapshot: ps.Snapshot, deleting: ps.Deleting, job: newCopyJob(ps.SizeBytes, ps.CopiedBytes)}
		r.snaps[ps.ID] = sr
		switch {
		case ps.Deleting:
			r.jobs.pending = append(r.jobs.pending, func() {
				if !r.jobs.add() {
					return
				}
				go func() {
					defer r.jobs.wg.Done()
					if err := r.finishDelete(sr); err != nil {
						klog.ErrorS(err, "volumes: finishing a snapshot deletion", "snapshot", sr.ID)
					}
				}()
			})
		case !ps.Ready && ps.Error == "":
			sr.job.copied.Store(0)
			r.jobs.pending = append(r.jobs.pending, func() { r.startSnapshotLocked(sr, true) })
		default:
			sr.job.finish(ps.Error)
		}
	}
	r.credits = st.Credits
	for _, pc := range st.Clones {
		cr := &cloneRec{Clone: pc.Clone, dev: pc.DestDev, ino: pc.DestIno, job: newCopyJob(pc.SizeBytes, pc.CopiedBytes)}
		r.clones[pc.Dest] = cr
		if !pc.Ready && pc.Error == "" {
			cr.job.copied.Store(0)
			r.jobs.pending = append(r.jobs.pending, func() { r.startCloneLocked(cr, true) })
		} else {
			cr.job.finish(pc.Error)
		}
	}
	return nil
}

// notBeneath checks that directory dir (existing) is neither root nor
// beneath it, symlinks resolved: NFS clients must not reach it.
func notBeneath(root, dir string) error {
	r, err := filepath.Abs(root)
	if err == nil {
		r, err = filepath.EvalSymlinks(r)
	}
	d, derr := filepath.Abs(dir)
	if derr == nil {
		d, derr = filepath.EvalSymlinks(d)
	}
	if err != nil || derr != nil {
		return fmt.Errorf("volumes: directory %q: %w", dir, errors.Join(err, derr))
	}
	if d == r || strings.HasPrefix(d, strings.TrimSuffix(r, "/")+"/") {
		return fmt.Errorf("volumes: directory %q is beneath the root %q: NFS clients could reach it", dir, root)
	}
	return nil
}

// saveLocked writes the registry to the state file atomically (a
// temporary file, fsync, rename, fsync of the directory). r.mu is held.
// Errors are internal (no admin sentinel).
func (r *Registry) saveLocked() error {
	if r.stateFile == "" {
		return nil
	}
	st := persisted{Version: stateVersion, Volumes: []persistedVolume{}, Snapshots: []persistedSnapshot{}, Clones: []persistedClone{}, Credits: r.credits}
	for _, v := range r.sortedVolumes() {
		st.Volumes = append(st.Volumes, persistedVolume{Path: v.path, QuotaBytes: v.quota.Load(), Access: v.access, Meta: v.meta})
	}
	for _, sr := range r.snaps {
		st.Snapshots = append(st.Snapshots, persistedSnapshot{Snapshot: sr.info(), Deleting: sr.deleting})
	}
	slices.SortFunc(st.Snapshots, func(a, b persistedSnapshot) int { return strings.Compare(a.ID, b.ID) })
	for _, cr := range r.clones {
		st.Clones = append(st.Clones, persistedClone{Clone: cr.info(), DestDev: cr.dev, DestIno: cr.ino})
	}
	slices.SortFunc(st.Clones, func(a, b persistedClone) int { return strings.Compare(a.Dest, b.Dest) })
	data, err := json.MarshalIndent(&st, "", "  ")
	if err != nil {
		return fmt.Errorf("volumes: state: %w", err)
	}
	if err := atomicfile.Write(r.stateFile, data); err != nil {
		return fmt.Errorf("volumes: state: %w", err)
	}
	return nil
}

// now is the clock of snapshot creation times (UTC, second precision
// dropped below microseconds for stable JSON).
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }
