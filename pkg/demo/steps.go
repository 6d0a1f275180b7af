package demo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/devselect"
)

// Names of the demo's objects, as a cluster would name them.
const (
	volumeName   = "pvc-demo"
	cloneName    = "pvc-demo-clone"
	snapshotName = "snapshot-demo"
	namespace    = "default"
	// totalSteps is the number of steps run (printed as [ n/total]).
	totalSteps = 24
	// teardownTimeout bounds the teardown once the data steps are over
	// or have failed; it runs even after Ctrl-C.
	teardownTimeout = 2 * time.Minute
	// retryEvery is how often a step asks again for a long server-side
	// copy (snapshot, clone), as the sidecars do.
	retryEvery = 500 * time.Millisecond
)

// pod is one "pod" using a volume: its target path as kubelet builds it
// (pods/UID/volumes/kubernetes.io~csi/PV/mount under kubelet's root).
type pod struct {
	name, uid, volumeID, pv, target string
}

// scenario is one run of the demo.
type scenario struct {
	o         Options
	dir       string
	d         *deployment
	r         *report
	transport string // what carries NFS, for the report
	// negotiated is the RPC-over-RDMA version the mounts' connections
	// negotiated with the server ("version 2"), once a mount is up.
	negotiated string
	device     string // the RDMA device in short, e.g. "software iWARP siw0"
	nodeID     string
	params     map[string]string
	quota      int64
	files      []file
	vol        *csipb.Volume
	clone      *csipb.Volume

	// what exists, for the teardown after a failure (in creation order)
	pods      []pod
	published []string // volume IDs published to the node
	snapshots []string
	volumes   []string
}

func mountCap() *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}
}

// run sets up, runs every step and tears down; after a failure or an
// interruption it tears down what exists and returns the first error.
func (s *scenario) run(ctx context.Context) (err error) {
	start := time.Now()
	o := s.o
	if o.LogToFile {
		f, err := os.OpenFile(filepath.Join(s.dir, "demo.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		klog.LogToStderr(false)
		klog.SetOutput(f)
		defer func() {
			klog.Flush()
			klog.LogToStderr(true)
			f.Close()
		}()
	}
	s.transport, s.device = describeTransport(o.Transport)
	s.quota = roundMiB(2 * o.Size)
	s.files = plan(o.Size, o.Files)
	s.r = &report{w: o.Out, total: totalSteps, progress: o.Progress}
	w := o.Out
	fmt.Fprintf(w, "nfsrdma-csi demo: %s in %d files, through the CSI gRPC API, on this machine\n", FormatBytes(o.Size), o.Files)
	fmt.Fprintf(w, "directory: %s\n", s.dir)
	fmt.Fprintf(w, "transport: %s\n", s.transport)
	if o.LogToFile {
		fmt.Fprintf(w, "logs:      %s (services), %s/*.log (one per mount)\n", filepath.Join(s.dir, "demo.log"), filepath.Join(s.dir, "mounts"))
	}
	fmt.Fprintln(w)

	// data + snapshot copy + clone copy, unless reflinks share blocks
	need := 3*o.Size + 64<<20
	if free, ferr := freeBytes(s.dir); ferr == nil && free < need {
		return fmt.Errorf("%w: %s has %s free; the demo needs about %s (the data, a snapshot and a clone): use --size or --dir elsewhere",
			ErrHost, s.dir, FormatBytes(free), FormatBytes(need))
	}
	s.d, err = newDeployment(s.dir)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			s.cleanup()
		}
		if ctx.Err() != nil && err != nil && !errors.Is(err, ErrHost) && !errors.Is(err, ErrInterrupted) {
			during := "the setup"
			if n := len(s.r.results); n > 0 {
				during = s.r.results[n-1].name
			}
			err = fmt.Errorf("%w during %q; what was set up has been torn down", ErrInterrupted, during)
		}
		if err != nil && o.Keep {
			fmt.Fprintf(w, "logs kept in %s\n", s.dir)
		}
	}()
	if err := s.setup(ctx); err != nil {
		return err
	}
	if err := s.data(ctx); err != nil {
		return err
	}
	if o.Keep {
		s.keep(ctx)
	}
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	if err := s.teardown(tctx); err != nil {
		return err
	}
	s.r.summary(withVersion(s.transport, s.negotiated), time.Since(start))
	if ctx.Err() != nil && !o.Keep {
		return fmt.Errorf("%w during the teardown (which completed)", ErrInterrupted)
	}
	fmt.Fprintf(w, "result:    every step passed; %s written through pod-a's mount and verified (SHA-256) through pod-b's\n", FormatBytes(o.Size))
	return nil
}

// rdmaName names RPC-over-RDMA in describeTransport's sentence; the
// version each connection negotiates is known once a mount is up.
const rdmaName = "RPC-over-RDMA"

// describeTransport says what carries the pods' NFS traffic: for RDMA,
// the device pkg/verbs/devselect picks for the server's address, and why.
// It returns the sentence and the device in short.
func describeTransport(t string) (string, string) {
	if t == "tcp" {
		return "TCP (NFSv3 over ONC RPC record marking; --transport tcp)", "tcp"
	}
	dev, ch, err := devselect.Select(serverHost, "")
	if err != nil {
		return "RDMA (" + rdmaName + "); device selection failed: " + err.Error(), "unknown device"
	}
	dev.Close()
	if ch.Provider == devselect.ProviderSIW {
		return fmt.Sprintf("RDMA (%s) over software iWARP %s, no RDMA NIC used (%s)", rdmaName, ch.Device, ch.Reason),
			"software iWARP " + ch.Device
	}
	return fmt.Sprintf("RDMA (%s); this node's device: %s, %s (%s)", rdmaName, ch.Device, ch.Transport, ch.Reason),
		ch.Device + " (" + ch.Transport + ")"
}

// withVersion adds the negotiated RPC-over-RDMA version ("version 2") to
// describeTransport's sentence; unchanged when vers is "".
func withVersion(transport, vers string) string {
	if vers == "" {
		return transport
	}
	return strings.Replace(transport, "("+rdmaName, "("+rdmaName+" "+vers, 1)
}

// negotiatedVersions returns the RPC-over-RDMA versions the export
// server's connections from the local ports negotiated ("version 2", or
// "versions 1, 2" when they differ); "" when none has one yet.
func (s *scenario) negotiatedVersions(localPorts []int) string {
	seen := map[int]bool{}
	for _, c := range s.d.srv.Protocol().RDMAConnections() {
		_, ps, err := net.SplitHostPort(c.Peer)
		if err != nil {
			continue
		}
		p, err := strconv.Atoi(ps)
		if err == nil && slices.Contains(localPorts, p) && c.Version > 0 {
			seen[c.Version] = true
		}
	}
	vs := slices.Sorted(maps.Keys(seen))
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("version %d", vs[0])
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strconv.Itoa(v)
	}
	return "versions " + strings.Join(out, ", ")
}

// formatParams formats parameters as "k=v k=v", sorted by key.
func formatParams(p map[string]string) string {
	keys := slices.Sorted(maps.Keys(p))
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + p[k]
	}
	return strings.Join(out, " ")
}

func roundMiB(n int64) int64 { return (n + 1<<20 - 1) &^ (1<<20 - 1) }

// setup: steps 1-6, the deployment and two pods on one volume.
func (s *scenario) setup(ctx context.Context) error {
	d := s.d
	if err := s.r.run("Start export server", func(*step) (string, error) {
		if err := d.startServer(); err != nil {
			return "", err
		}
		return fmt.Sprintf("NFS tcp :%d, NFS/RDMA :%d (%d credits per connection), MOUNT :%d, admin API :%d",
			d.ports.NFS, d.ports.RDMA, serverCredits, d.ports.Mount, d.ports.Admin), nil
	}); err != nil {
		return err
	}
	if err := s.r.run("Start mounter, CSI node and controller", func(*step) (string, error) {
		if err := d.startPlugins(ctx, s.o.Exe); err != nil {
			return "", err
		}
		info, err := d.ident.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
		if err != nil {
			return "", err
		}
		ni, err := d.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
		if err != nil {
			return "", err
		}
		s.nodeID = ni.GetNodeId()
		return fmt.Sprintf("%s %s; node ID %s; sockets in %s", info.GetName(), info.GetVendorVersion(), s.nodeID, filepath.Dir(d.nodeSock)), nil
	}); err != nil {
		return err
	}
	s.params = map[string]string{
		csi.ParamServer:        serverHost,
		csi.ParamOnDelete:      "delete",
		csi.ParamTransport:     s.o.Transport,
		csi.ParamCreditsPerPod: strconv.Itoa(s.o.CreditsPerPod),
	}
	if err := s.r.run("CreateVolume "+volumeName, func(*step) (string, error) {
		v, err := s.createVolume(ctx, volumeName, nil)
		if err != nil {
			return "", err
		}
		s.vol = v
		return fmt.Sprintf("quota %s; StorageClass parameters %s", FormatBytes(v.GetCapacityBytes()), formatParams(s.params)), nil
	}); err != nil {
		return err
	}
	if err := s.r.run("ControllerPublishVolume "+volumeName, func(*step) (string, error) {
		return s.controllerPublish(ctx, s.vol)
	}); err != nil {
		return err
	}
	for _, name := range []string{"pod-a", "pod-b"} {
		if err := s.r.run("NodePublishVolume "+name, func(*step) (string, error) {
			return s.nodePublish(ctx, name, volumeName, s.vol)
		}); err != nil {
			return err
		}
	}
	return nil
}

// data: steps 7-16, the data through the mounts, stats, snapshot, clone
// and expansion.
func (s *scenario) data(ctx context.Context) error {
	a, b := s.pods[0], s.pods[1]
	if err := s.r.run("Write files through pod-a", func(st *step) (string, error) {
		if err := writeFiles(ctx, a.target, s.files, st.Progress(s.o.Size)); err != nil {
			return "", err
		}
		st.Bytes(s.o.Size)
		return fmt.Sprintf("%d random files, each fsync'd and closed", len(s.files)), nil
	}); err != nil {
		return err
	}
	if err := s.r.run("Read and verify through pod-b", func(st *step) (string, error) {
		if err := verifyFiles(ctx, b.target, s.files, st.Progress(s.o.Size)); err != nil {
			return "", err
		}
		st.Bytes(s.o.Size)
		return fmt.Sprintf("%d files, SHA-256 of each matches what pod-a wrote (%s: %s...)", len(s.files), s.files[0].name, s.files[0].short()), nil
	}); err != nil {
		return err
	}
	if err := s.r.run("Lock through pod-a, blocking pod-b", func(*step) (string, error) {
		return lockAcrossPods(ctx, a.target, b.target)
	}); err != nil {
		return err
	}
	if err := s.r.run("NodeGetVolumeStats", func(*step) (string, error) {
		bytes, inodes, err := s.stats(ctx, a)
		if err != nil {
			return "", err
		}
		if bytes.GetTotal() != s.quota {
			return "", fmt.Errorf("%w: volume stats total %d bytes, the quota is %d", ErrVerify, bytes.GetTotal(), s.quota)
		}
		return fmt.Sprintf("%s used of the %s quota (%.0f%%), %s available; inodes: %d used, %d free (the export's file system)",
			FormatBytes(bytes.GetUsed()), FormatBytes(bytes.GetTotal()), 100*float64(bytes.GetUsed())/float64(bytes.GetTotal()),
			FormatBytes(bytes.GetAvailable()), inodes.GetUsed(), inodes.GetAvailable()), nil
	}); err != nil {
		return err
	}
	var snap *csipb.Snapshot
	if err := s.r.run("CreateSnapshot "+snapshotName, func(st *step) (string, error) {
		var err error
		snap, err = s.snapshot(ctx)
		if err != nil {
			return "", err
		}
		st.Bytes(snap.GetSizeBytes())
		return fmt.Sprintf("server-side copy of %s, ready to use", volumeName), nil
	}); err != nil {
		return err
	}
	if err := s.r.run("CreateVolume "+cloneName+" (from snapshot)", func(st *step) (string, error) {
		src := &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
			Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshotId()}}}
		v, err := s.createVolume(ctx, cloneName, src)
		if err != nil {
			return "", err
		}
		s.clone = v
		st.Bytes(snap.GetSizeBytes())
		return fmt.Sprintf("restored from %s, quota %s", snapshotName, FormatBytes(v.GetCapacityBytes())), nil
	}); err != nil {
		return err
	}
	if err := s.r.run("ControllerPublishVolume "+cloneName, func(*step) (string, error) {
		return s.controllerPublish(ctx, s.clone)
	}); err != nil {
		return err
	}
	if err := s.r.run("NodePublishVolume pod-c ("+cloneName+")", func(*step) (string, error) {
		return s.nodePublish(ctx, "pod-c", cloneName, s.clone)
	}); err != nil {
		return err
	}
	c := s.pods[2]
	if err := s.r.run("Verify the clone through pod-c", func(st *step) (string, error) {
		f := s.files[0]
		if err := verifyFiles(ctx, c.target, []file{f}, st.Progress(f.size)); err != nil {
			return "", err
		}
		st.Bytes(f.size)
		return fmt.Sprintf("%s in the clone has the SHA-256 pod-a wrote (%s...)", f.name, f.short()), nil
	}); err != nil {
		return err
	}
	return s.r.run("ControllerExpandVolume "+volumeName, func(*step) (string, error) {
		want := 2 * s.quota
		ex, err := s.d.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: s.vol.GetVolumeId(),
			CapacityRange: &csipb.CapacityRange{RequiredBytes: want}, VolumeCapability: mountCap()})
		if err != nil {
			return "", err
		}
		bytes, _, err := s.stats(ctx, a)
		if err != nil {
			return "", err
		}
		if bytes.GetTotal() != want {
			return "", fmt.Errorf("%w: after expansion to %d bytes pod-a's mount reports %d", ErrVerify, want, bytes.GetTotal())
		}
		return fmt.Sprintf("quota %s -> %s; pod-a's mount sees %s (no remount)", FormatBytes(s.quota), FormatBytes(ex.GetCapacityBytes()), FormatBytes(bytes.GetTotal())), nil
	})
}

// keep prints the mount points and waits until ctx ends (Ctrl-C).
func (s *scenario) keep(ctx context.Context) {
	w := s.o.Out
	fmt.Fprintf(w, "\nThe mounts stay up until Ctrl-C (--keep):\n")
	for _, p := range s.pods {
		fmt.Fprintf(w, "  %-6s %s  (%s)\n", p.name, p.target, p.pv)
	}
	fmt.Fprintf(w, "  e.g.   ls -l %s; sha256sum %s\n", s.pods[1].target, filepath.Join(s.pods[1].target, s.files[0].name))
	fmt.Fprintf(w, "Press Ctrl-C to tear down.\n\n")
	<-ctx.Done()
	fmt.Fprintf(w, "\n")
}

// teardown: steps 17-24, as Kubernetes does when the pods and the PVCs
// go, then the services stop and nothing may be left.
func (s *scenario) teardown(ctx context.Context) error {
	for len(s.pods) > 0 {
		p := s.pods[0]
		if err := s.r.run("NodeUnpublishVolume "+p.name, func(*step) (string, error) {
			return s.nodeUnpublish(ctx, p)
		}); err != nil {
			return err
		}
	}
	if err := s.r.run("ControllerUnpublishVolume x2", func(*step) (string, error) {
		for len(s.published) > 0 {
			if err := s.controllerUnpublish(ctx, s.published[0]); err != nil {
				return "", err
			}
		}
		return "export access of " + s.nodeID + " revoked on both volumes", nil
	}); err != nil {
		return err
	}
	if err := s.r.run("DeleteSnapshot "+snapshotName, func(*step) (string, error) {
		for len(s.snapshots) > 0 {
			if err := s.deleteSnapshot(ctx, s.snapshots[0]); err != nil {
				return "", err
			}
		}
		return "deleted on the export server", nil
	}); err != nil {
		return err
	}
	if err := s.r.run("DeleteVolume x2", func(*step) (string, error) {
		for len(s.volumes) > 0 {
			if err := s.deleteVolume(ctx, s.volumes[0]); err != nil {
				return "", err
			}
		}
		return "onDelete=delete: both volume directories removed", nil
	}); err != nil {
		return err
	}
	if err := s.r.run("Stop services", func(*step) (string, error) {
		return "controller, node, mounter, export server stopped", s.d.stop()
	}); err != nil {
		return err
	}
	return s.r.run("Check that nothing is left", func(*step) (string, error) {
		return s.check()
	})
}

// check verifies that nothing is left: no mount beneath the directory,
// no `driver mount` process, an empty export directory.
func (s *scenario) check() (string, error) {
	ms, err := mountsUnder(s.dir)
	if err != nil {
		return "", err
	}
	if len(ms) > 0 {
		return "", fmt.Errorf("%w: still mounted: %s (%s)", ErrVerify, ms[0].MountPoint, ms[0].FsType)
	}
	// a FUSE server ends once unmounted; give the last one a moment
	var pids []int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if pids = mountProcesses(s.dir); len(pids) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(pids) > 0 {
		return "", fmt.Errorf("%w: driver mount processes still running: %v", ErrVerify, pids)
	}
	ents, err := os.ReadDir(s.d.root)
	if err != nil {
		return "", err
	}
	if len(ents) > 0 {
		return "", fmt.Errorf("%w: the export directory still holds %s", ErrVerify, ents[0].Name())
	}
	return "no mount, no mount process, export directory empty", nil
}

// cleanup tears down whatever exists after a failure or an interruption,
// best effort, with its own deadline; it prints what it did.
func (s *scenario) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
	defer cancel()
	w := s.o.Out
	fmt.Fprintf(w, "\ntearing down:\n")
	if s.d != nil && s.d.pluginsStarted && !s.d.done {
		for _, p := range slices.Clone(s.pods) {
			_, err := s.nodeUnpublish(ctx, p)
			s.r.note("NodeUnpublishVolume %s: %s", p.name, errText(err))
		}
		for _, id := range slices.Clone(s.published) {
			s.r.note("ControllerUnpublishVolume %s: %s", id, errText(s.controllerUnpublish(ctx, id)))
		}
		for _, id := range slices.Clone(s.snapshots) {
			s.r.note("DeleteSnapshot %s: %s", id, errText(s.deleteSnapshot(ctx, id)))
		}
		for _, id := range slices.Clone(s.volumes) {
			s.r.note("DeleteVolume %s: %s", id, errText(s.deleteVolume(ctx, id)))
		}
	}
	if s.d != nil {
		if err := s.d.stop(); err != nil {
			s.r.note("stop services: %v", err)
		}
	}
	if ms := sweepMounts(s.dir); len(ms) > 0 {
		s.r.note("detached mounts left behind: %v", ms)
	}
	if pids := mountProcesses(s.dir); len(pids) > 0 {
		killProcesses(pids)
		s.r.note("ended mount processes left behind: %v", pids)
	}
	s.r.note("done")
}

func errText(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// createVolume calls CreateVolume as the external-provisioner does, again
// while the server-side copy of a clone is in progress (Aborted).
func (s *scenario) createVolume(ctx context.Context, name string, src *csipb.VolumeContentSource) (*csipb.Volume, error) {
	req := &csipb.CreateVolumeRequest{Name: name, CapacityRange: &csipb.CapacityRange{RequiredBytes: s.quota},
		VolumeCapabilities: []*csipb.VolumeCapability{mountCap()}, Parameters: s.params, VolumeContentSource: src}
	for {
		r, err := s.d.ctrl.CreateVolume(ctx, req)
		if status.Code(err) == codes.Aborted {
			if err := sleep(ctx, retryEvery); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		s.volumes = append(s.volumes, r.GetVolume().GetVolumeId())
		return r.GetVolume(), nil
	}
}

// snapshot calls CreateSnapshot as the external-snapshotter does, again
// until the snapshot is ready to use.
func (s *scenario) snapshot(ctx context.Context) (*csipb.Snapshot, error) {
	for {
		r, err := s.d.ctrl.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: snapshotName, SourceVolumeId: s.vol.GetVolumeId()})
		if err != nil {
			return nil, err
		}
		id := r.GetSnapshot().GetSnapshotId()
		if !slices.Contains(s.snapshots, id) {
			s.snapshots = append(s.snapshots, id)
		}
		if r.GetSnapshot().GetReadyToUse() {
			return r.GetSnapshot(), nil
		}
		if err := sleep(ctx, retryEvery); err != nil {
			return nil, err
		}
	}
}

func (s *scenario) controllerPublish(ctx context.Context, v *csipb.Volume) (string, error) {
	_, err := s.d.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: v.GetVolumeId(),
		NodeId: s.nodeID, VolumeCapability: mountCap(), VolumeContext: v.GetVolumeContext()})
	if err != nil {
		return "", err
	}
	s.published = append(s.published, v.GetVolumeId())
	return "export access granted to " + s.nodeID, nil
}

func (s *scenario) controllerUnpublish(ctx context.Context, id string) error {
	_, err := s.d.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: s.nodeID})
	if err == nil {
		s.published = slices.DeleteFunc(s.published, func(x string) bool { return x == id })
	}
	return err
}

func (s *scenario) deleteSnapshot(ctx context.Context, id string) error {
	_, err := s.d.ctrl.DeleteSnapshot(ctx, &csipb.DeleteSnapshotRequest{SnapshotId: id})
	if err == nil {
		s.snapshots = slices.DeleteFunc(s.snapshots, func(x string) bool { return x == id })
	}
	return err
}

func (s *scenario) deleteVolume(ctx context.Context, id string) error {
	_, err := s.d.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
	if err == nil {
		s.volumes = slices.DeleteFunc(s.volumes, func(x string) bool { return x == id })
	}
	return err
}

// nodePublish publishes v for a new pod as kubelet does with
// podInfoOnMount, checks the FUSE mount and reports its server process
// and its own connection to the export server.
func (s *scenario) nodePublish(ctx context.Context, name, pv string, v *csipb.Volume) (string, error) {
	p := pod{name: name, uid: newUID(), volumeID: v.GetVolumeId(), pv: pv}
	p.target = filepath.Join(s.d.kubelet, "pods", p.uid, "volumes", "kubernetes.io~csi", pv, "mount")
	vc := map[string]string{
		"csi.storage.k8s.io/pod.name":            name,
		"csi.storage.k8s.io/pod.namespace":       namespace,
		"csi.storage.k8s.io/pod.uid":             p.uid,
		"csi.storage.k8s.io/serviceAccount.name": "default",
		"csi.storage.k8s.io/ephemeral":           "false",
	}
	for k, val := range v.GetVolumeContext() {
		vc[k] = val
	}
	_, err := s.d.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: p.volumeID, TargetPath: p.target,
		VolumeCapability: mountCap(), VolumeContext: vc})
	if err != nil {
		return "", err
	}
	s.pods = append(s.pods, p)
	ms, err := mountsUnder(p.target)
	if err != nil {
		return "", err
	}
	if len(ms) == 0 || ms[len(ms)-1].FsType != fuseType {
		return "", fmt.Errorf("%w: %s is not a %s mount after NodePublishVolume", ErrVerify, p.target, fuseType)
	}
	source := ms[len(ms)-1].Source
	pid, logPath := 0, ""
	for _, m := range s.d.mnt.List() {
		if m.Target == p.target {
			pid, logPath = m.PID, m.Log
		}
	}
	if pid == 0 {
		return "", fmt.Errorf("%w: the mounter serves no mount of %s", ErrVerify, p.target)
	}
	// the device the mount process chose, from its log; else what
	// devselect says for this node
	dev := s.device
	if d, ok := mountDevice(logPath); ok {
		dev = d
	}
	port := s.d.ports.RDMA
	if s.o.Transport == "tcp" {
		port = s.d.ports.NFS
	}
	local, err := connections(pid, port)
	if err != nil {
		return "", err
	}
	n := len(local)
	how := "tcp"
	if s.o.Transport != "tcp" {
		vers := s.negotiatedVersions(local)
		if vers == "" {
			vers = "version not negotiated yet"
		} else if s.negotiated == "" {
			s.negotiated = vers
		}
		how = fmt.Sprintf("rdma, %s %s, %s, %d credits", rdmaName, vers, dev, s.o.CreditsPerPod)
	}
	if n == 0 {
		return "", fmt.Errorf("%w: the FUSE server of %s (pid %d) has no connection to the NFS port %d", ErrVerify, p.target, pid, port)
	}
	conns := "1 connection"
	if n != 1 {
		conns = fmt.Sprintf("%d connections", n)
	}
	return fmt.Sprintf("mounted %s (%s; FUSE server pid %d, %s to :%d)", source, how, pid, conns, port), nil
}

// nodeUnpublish unpublishes p as kubelet does when the pod goes, and
// checks that its mount and FUSE server are gone.
func (s *scenario) nodeUnpublish(ctx context.Context, p pod) (string, error) {
	pid := 0
	for _, m := range s.d.mnt.List() {
		if m.Target == p.target {
			pid = m.PID
		}
	}
	if _, err := s.d.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: p.volumeID, TargetPath: p.target}); err != nil {
		return "", err
	}
	s.pods = slices.DeleteFunc(s.pods, func(x pod) bool { return x.target == p.target })
	if ms, err := mountsUnder(p.target); err != nil || len(ms) > 0 {
		return "", fmt.Errorf("%w: %s still mounted after NodeUnpublishVolume (%v)", ErrVerify, p.target, err)
	}
	for _, m := range s.d.mnt.List() {
		if m.Target == p.target {
			return "", fmt.Errorf("%w: the FUSE server of %s (pid %d) still runs", ErrVerify, p.target, m.PID)
		}
	}
	return fmt.Sprintf("unmounted, FUSE server pid %d exited, target removed", pid), nil
}

// stats calls NodeGetVolumeStats on p's mount.
func (s *scenario) stats(ctx context.Context, p pod) (bytes, inodes *csipb.VolumeUsage, err error) {
	r, err := s.d.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: p.volumeID, VolumePath: p.target})
	if err != nil {
		return nil, nil, err
	}
	for _, u := range r.GetUsage() {
		switch u.GetUnit() {
		case csipb.VolumeUsage_BYTES:
			bytes = u
		case csipb.VolumeUsage_INODES:
			inodes = u
		}
	}
	if bytes == nil || inodes == nil {
		return nil, nil, fmt.Errorf("%w: NodeGetVolumeStats without bytes or inodes: %v", ErrVerify, r)
	}
	return bytes, inodes, nil
}

// newUID returns a random pod UID in the UUID form kubelet uses.
func newUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
