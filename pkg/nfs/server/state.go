package server

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

// initRegistry sets up the registry from opts: the state and snapshot
// directories, then the state file's volumes (each resolved and counted;
// one whose directory is missing stays registered but unexported, and is
// logged), snapshots and clones (interrupted copies are queued to start
// again; deletions interrupted are finished).
func (s *Server) initRegistry(opts Options) error {
	s.reg = registry{vols: map[string]*volume{}, snaps: map[string]*snapRec{}, clones: map[string]*cloneRec{}}
	s.jobs.init(opts.CopyJobs)
	snapDir := opts.SnapshotDir
	if opts.StateDir != "" {
		if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
			return fmt.Errorf("nfs server: state directory: %w", err)
		}
		if err := notBeneath(opts.Root, opts.StateDir); err != nil {
			return err
		}
		s.reg.stateFile = filepath.Join(opts.StateDir, StateFileName)
		if snapDir == "" {
			snapDir = filepath.Join(opts.StateDir, "snapshots")
		}
	}
	if snapDir != "" {
		if err := os.MkdirAll(snapDir, 0o700); err != nil {
			return fmt.Errorf("nfs server: snapshot directory: %w", err)
		}
		if err := notBeneath(opts.Root, snapDir); err != nil {
			return err
		}
		abs, err := filepath.Abs(snapDir)
		if err != nil {
			return fmt.Errorf("nfs server: snapshot directory: %w", err)
		}
		s.reg.snapDir = abs
	}
	if s.reg.stateFile == "" {
		return nil
	}
	data, err := os.ReadFile(s.reg.stateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nfs server: state: %w", err)
	}
	var st persisted
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("nfs server: state file %s: %w", s.reg.stateFile, err)
	}
	if st.Version != stateVersion {
		return fmt.Errorf("nfs server: state file %s: version %d, want %d", s.reg.stateFile, st.Version, stateVersion)
	}
	if err := checkCredits(st.Credits); err != nil {
		return fmt.Errorf("nfs server: state file %s: credits: %w", s.reg.stateFile, err)
	}
	for _, pv := range st.Volumes {
		p, err := volumePath(pv.Path)
		if err != nil {
			return fmt.Errorf("nfs server: state file %s: %w", s.reg.stateFile, err)
		}
		v := &volume{path: p, access: pv.Access, meta: pv.Meta}
		v.quota.Store(pv.QuotaBytes)
		ex, err := s.resolveVolume(p)
		if err == nil {
			err = s.recount(v, p)
		}
		if err != nil {
			klog.ErrorS(err, "nfs server: volume not exported (PutVolume resolves it again)", "volume", p)
		} else {
			v.ex = ex
		}
		s.reg.vols[p] = v
		klog.InfoS("nfs server: volume restored", "volume", p, "quotaBytes", pv.QuotaBytes,
			"usedBytes", v.used.Load(), "usedInodes", v.inodes.Load(), "nodes", len(v.access), "exported", v.ex != nil)
	}
	for _, ps := range st.Snapshots {
		r := &snapRec{Snapshot: ps.Snapshot, deleting: ps.Deleting, job: newCopyJob(ps.SizeBytes, ps.CopiedBytes)}
		s.reg.snaps[ps.ID] = r
		switch {
		case ps.Deleting:
			s.jobs.pending = append(s.jobs.pending, func() {
				if !s.jobs.add() {
					return
				}
				go func() {
					defer s.jobs.wg.Done()
					if err := s.finishDelete(r); err != nil {
						klog.ErrorS(err, "nfs server: finishing a snapshot deletion", "snapshot", r.ID)
					}
				}()
			})
		case !ps.Ready && ps.Error == "":
			r.job.copied.Store(0)
			s.jobs.pending = append(s.jobs.pending, func() { s.startSnapshotLocked(r, true) })
		default:
			r.job.finish(ps.Error)
		}
	}
	s.credits = st.Credits
	for _, pc := range st.Clones {
		r := &cloneRec{Clone: pc.Clone, dev: pc.DestDev, ino: pc.DestIno, job: newCopyJob(pc.SizeBytes, pc.CopiedBytes)}
		s.reg.clones[pc.Dest] = r
		if !pc.Ready && pc.Error == "" {
			r.job.copied.Store(0)
			s.jobs.pending = append(s.jobs.pending, func() { s.startCloneLocked(r, true) })
		} else {
			r.job.finish(pc.Error)
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
		return fmt.Errorf("nfs server: directory %q: %w", dir, errors.Join(err, derr))
	}
	if d == r || strings.HasPrefix(d, strings.TrimSuffix(r, "/")+"/") {
		return fmt.Errorf("nfs server: directory %q is beneath the root %q: NFS clients could reach it", dir, root)
	}
	return nil
}

// saveLocked writes the registry to the state file atomically (a
// temporary file, fsync, rename, fsync of the directory). s.tmu is held.
// Errors are internal (no admin sentinel).
func (s *Server) saveLocked() error {
	if s.reg.stateFile == "" {
		return nil
	}
	st := persisted{Version: stateVersion, Volumes: []persistedVolume{}, Snapshots: []persistedSnapshot{}, Clones: []persistedClone{}, Credits: s.credits}
	for _, v := range s.reg.sortedVolumes() {
		st.Volumes = append(st.Volumes, persistedVolume{Path: v.path, QuotaBytes: v.quota.Load(), Access: v.access, Meta: v.meta})
	}
	for _, r := range s.reg.snaps {
		st.Snapshots = append(st.Snapshots, persistedSnapshot{Snapshot: r.info(), Deleting: r.deleting})
	}
	slices.SortFunc(st.Snapshots, func(a, b persistedSnapshot) int { return strings.Compare(a.ID, b.ID) })
	for _, r := range s.reg.clones {
		st.Clones = append(st.Clones, persistedClone{Clone: r.info(), DestDev: r.dev, DestIno: r.ino})
	}
	slices.SortFunc(st.Clones, func(a, b persistedClone) int { return strings.Compare(a.Dest, b.Dest) })
	data, err := json.MarshalIndent(&st, "", "  ")
	if err != nil {
		return fmt.Errorf("nfs server: state: %w", err)
	}
	if err := writeFileAtomic(s.reg.stateFile, data); err != nil {
		return fmt.Errorf("nfs server: state: %w", err)
	}
	return nil
}

// writeFileAtomic replaces name with data: written to a temporary file in
// the same directory, synced, renamed over name, and the directory synced.
func writeFileAtomic(name string, data []byte) error {
	dir := filepath.Dir(name)
	f, err := os.CreateTemp(dir, "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	d.Close()
	return err
}

// now is the clock of snapshot creation times (UTC, second precision
// dropped below microseconds for stable JSON).
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }
