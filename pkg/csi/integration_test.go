package csi

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/mounter"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

func mountCap() *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}
}

// volume creates, publishes to node1 and mounts a volume for one pod;
// it returns the volume ID and the mount point.
func (e *env) volume(name string, bytes int64, params map[string]string) (string, string) {
	t := e.t
	t.Helper()
	ctx := testenv.Context(t, 2*time.Minute)
	p := map[string]string{ParamServer: "127.0.0.1"}
	for k, v := range params {
		p[k] = v
	}
	cv, err := e.controller().CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name,
		CapacityRange:      &csipb.CapacityRange{RequiredBytes: bytes},
		VolumeCapabilities: []*csipb.VolumeCapability{mountCap()}, Parameters: p})
	if err != nil {
		t.Fatal("CreateVolume:", err)
	}
	id := cv.GetVolume().GetVolumeId()
	if _, err := e.controller().ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
		VolumeId: id, NodeId: "node1@127.0.0.1", VolumeCapability: mountCap(), VolumeContext: cv.GetVolume().GetVolumeContext()}); err != nil {
		t.Fatal("ControllerPublishVolume:", err)
	}
	// the server is given the node's name beside its address: the name a
	// node's RPC-with-TLS certificate grants it the volume by
	if vid, err := parseVolumeID(id); err == nil && e.adminP != 0 {
		v, err := admin.NewClient("http://127.0.0.1:"+strconv.Itoa(e.adminP), e.token, nil).GetVolume(ctx, vid.adminPath())
		if err != nil || len(v.Access) != 1 || v.Access[0].Node != "node1@127.0.0.1" || v.Access[0].Name != "node1" ||
			!slices.Equal(v.Access[0].Addrs, []string{"127.0.0.1"}) {
			t.Fatalf("access list after ControllerPublishVolume: %+v, %v", v.Access, err)
		}
	}
	target := filepath.Join(e.targetRoot, "pods", name, "mount")
	vc := map[string]string{ctxPodName: "pod-" + name, ctxPodNamespace: "default", ctxPodUID: "uid-" + name}
	for k, v := range cv.GetVolume().GetVolumeContext() {
		vc[k] = v
	}
	if _, err := e.node().NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: id, TargetPath: target, VolumeCapability: mountCap(), VolumeContext: vc}); err != nil {
		t.Fatal("NodePublishVolume:", err)
	}
	// the kernel checks mode bits on the volume (mountopts.KernelOptions)
	if mi, ok, err := mountAt(target); err != nil || !ok || !slices.Contains(mi.SuperOptions, "default_permissions") {
		t.Fatalf("%s: mounted %v (%v), super options %v: want default_permissions", target, ok, err, mi.SuperOptions)
	}
	return id, target
}

// teardown unpublishes and deletes a volume and checks it is all gone.
func (e *env) teardown(id, target string) {
	t := e.t
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	if _, err := e.node().NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal("NodeUnpublishVolume:", err)
	}
	if _, ok, _ := mountAt(target); ok {
		t.Fatalf("%s still mounted", target)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target %s not removed: %v", target, err)
	}
	if _, err := e.controller().ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node1@127.0.0.1"}); err != nil {
		t.Fatal("ControllerUnpublishVolume:", err)
	}
	if _, err := e.controller().DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal("DeleteVolume:", err)
	}
	vid, _ := parseVolumeID(id)
	if _, err := os.Stat(filepath.Join(e.root, vid.SubDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("volume directory left after DeleteVolume: %v", err)
	}
}

// writeSync writes data to path and fsyncs and closes it, returning the
// first error.
func writeSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func randBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestQuota: past the volume's quota a write fails with ENOSPC through
// the mount, what was written before is intact, and after
// ControllerExpandVolume the same write succeeds; the node's volume stats
// report the quota.
func TestQuota(t *testing.T) {
	e := newEnv(t)
	e.startAll()
	id, target := e.volume("quota", 4<<20, nil)
	first := randBytes(t, 3<<20)
	if err := writeSync(filepath.Join(target, "first"), first); err != nil {
		t.Fatal("write within the quota:", err)
	}
	second := randBytes(t, 2<<20)
	err := writeSync(filepath.Join(target, "second"), second)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write past the quota: %v, want ENOSPC", err)
	}
	got, err := os.ReadFile(filepath.Join(target, "first"))
	if err != nil || !bytes.Equal(got, first) {
		t.Fatalf("data written before the quota was reached: %d bytes, %v; want it intact", len(got), err)
	}
	ctx := testenv.Context(t, time.Minute)
	st, err := e.node().NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil || st.GetUsage()[0].GetTotal() != 4<<20 {
		t.Fatalf("volume stats before expansion: %v %v; want total 4 MiB", st, err)
	}
	ex, err := e.controller().ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: id,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 16 << 20}, VolumeCapability: mountCap()})
	if err != nil || ex.GetCapacityBytes() != 16<<20 || ex.GetNodeExpansionRequired() {
		t.Fatalf("ControllerExpandVolume: %v %v", ex, err)
	}
	if err := writeSync(filepath.Join(target, "second"), second); err != nil {
		t.Fatal("write after expansion:", err)
	}
	if got, err := os.ReadFile(filepath.Join(target, "second")); err != nil || !bytes.Equal(got, second) {
		t.Fatalf("second file after expansion: %d bytes, %v", len(got), err)
	}
	st, err = e.node().NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	if err != nil || st.GetUsage()[0].GetTotal() != 16<<20 || st.GetUsage()[0].GetUsed() < 5<<20 {
		t.Fatalf("volume stats after expansion: %v %v; want total 16 MiB, at least 5 MiB used", st, err)
	}
	// metrics: the node's endpoint has the CSI calls and this pod's mount
	// (labelled with its volume and pod); the server's has the NFS WRITEs
	// by transport and the volume's quota
	nm := scrape(t, e.nodeMetrics)
	for _, want := range []string{
		`nfsrdma_csi_operations_total{grpc_code="OK",method="NodePublishVolume"} 1`,
		`pod="uid-quota"`, `nfsrdma_client_rpc_calls_total`, `nfsrdma_mount_scrape_up`,
		`nfsrdma_client_rpc_duration_seconds_bucket`, `nfsrdma_client_rpc_bytes_total`,
		`nfsrdma_mount_memory_bytes{kind="heap"`, `nfsrdma_mount_memory_limit_bytes{kind="write_behind"`,
		`nfsrdma_mount_inodes{`, `nfsrdma_client_write_verifier_changes_total{`,
		`nfsrdma_rpcrdma_registered_bytes{`, `nfsrdma_rpcrdma_calls_total{`,
	} {
		if !strings.Contains(nm, want) {
			t.Errorf("node metrics lack %s", want)
		}
	}
	sm := scrape(t, e.serverMetrics)
	for _, want := range []string{
		`nfsrdma_server_rpc_total{procedure="WRITE",program="nfs",status="success",transport="rdma"}`,
		`nfsrdma_volume_quota_bytes{volume="quota"} 1.6777216e+07`,
		`nfsrdma_rpcrdma_connections{role="responder"}`,
	} {
		if !strings.Contains(sm, want) {
			t.Errorf("server metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Logf("node metrics:\n%s\nserver metrics:\n%s", nm, sm)
	}
	e.teardown(id, target)
}

// TestNodeRestart: a pod writes through its mount while the node plugin
// is killed and started again; the writer never sees an error, the data
// is all there, publish again is idempotent, and unpublish is clean.
// A restarted mounter re-adopts the running mount process. Then a dead
// mount (its FUSE server killed) is repaired by the next
// NodePublishVolume.
func TestNodeRestart(t *testing.T) {
	e := newEnv(t)
	e.startAll()
	id, target := e.volume("restart", 0, nil)
	f, err := os.Create(filepath.Join(target, "log"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	var written atomic.Int64
	stop := make(chan struct{})
	werr := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				werr <- f.Sync()
				return
			default:
			}
			if _, err := f.Write(chunk); err != nil {
				werr <- err
				return
			}
			written.Add(int64(len(chunk)))
			if i%16 == 15 {
				if err := f.Sync(); err != nil {
					werr <- err
					return
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	e.stop("node", syscall.SIGKILL)
	before := written.Load()
	time.Sleep(time.Second)
	if written.Load() == before {
		t.Error("the writer made no progress while the node plugin was down")
	}
	e.startNode()
	// kubelet publishes again after a plugin restart: idempotent
	ctx := testenv.Context(t, time.Minute)
	vc := map[string]string{}
	cv, _ := parseVolumeID(id)
	vc[ctxServer], vc[ctxExport] = cv.Server, cv.Path()
	vc[ctxMountOptions] = "proto=rdma,port=" + strconv.Itoa(e.rdmaPort) + ",mountport=" + strconv.Itoa(e.mountPort)
	vc[ctxCredits] = strconv.Itoa(DefaultCreditsPerPod)
	if _, err := e.node().NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: id, TargetPath: target, VolumeCapability: mountCap(), VolumeContext: vc}); err != nil {
		t.Fatal("NodePublishVolume after restart:", err)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	if err := <-werr; err != nil {
		t.Fatal("the writer saw:", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal("close:", err)
	}
	n := written.Load()
	fi, err := os.Stat(filepath.Join(e.root, "restart", "log"))
	if err != nil || fi.Size() != n {
		t.Fatalf("on the server: %v %v, want %d bytes", fi, err, n)
	}

	// the mounter restarts: its mount process keeps serving and the new
	// mounter re-adopts it (same PID) from its state directory
	serving, err := (&mounter.Client{Socket: e.mounterSock}).List(ctx)
	if err != nil || len(serving) != 1 {
		t.Fatalf("mounter list: %v %v", serving, err)
	}
	e.stop("mounter", syscall.SIGTERM)
	e.startMounter()
	ms, err := (&mounter.Client{Socket: e.mounterSock}).List(ctx)
	if err != nil || len(ms) != 1 || ms[0].PID != serving[0].PID || ms[0].Target != target {
		t.Fatalf("after a mounter restart: %+v %v; want %+v re-adopted", ms, err, serving)
	}
	if got, err := os.ReadFile(filepath.Join(target, "log")); err != nil || int64(len(got)) != n {
		t.Fatalf("after a mounter restart: %d bytes, %v; want %d", len(got), err, n)
	}

	// the adopted mount process dies: the mounter takes the connection
	// the node plugin keeps up again (--recover)
	syscall.Kill(ms[0].PID, syscall.SIGKILL)
	var rs []mounter.Mount
	if !testenv.WaitFor(30*time.Second, func() bool {
		rs, _ = (&mounter.Client{Socket: e.mounterSock}).List(ctx)
		return len(rs) == 1 && rs[0].PID != ms[0].PID
	}) {
		t.Fatalf("the killed adopted process was not replaced: %+v", rs)
	}
	if got, err := os.ReadFile(filepath.Join(target, "log")); err != nil || int64(len(got)) != n {
		t.Fatalf("after the recovery: %d bytes, %v; want %d", len(got), err, n)
	}

	// a dead mount: its FUSE server killed while neither the node plugin
	// (the keeper) nor the mounter holds the connection
	e.stop("node", syscall.SIGKILL)
	e.stop("mounter", syscall.SIGTERM)
	syscall.Kill(rs[0].PID, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for healthy(target, time.Second) == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if err := healthy(target, time.Second); err == nil {
		t.Fatal("mount still healthy after its server was killed")
	}
	e.startNode()
	e.startMounter()
	if _, err := e.node().NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: id, TargetPath: target, VolumeCapability: mountCap(), VolumeContext: vc}); err != nil {
		t.Fatal("NodePublishVolume of a dead mount:", err)
	}
	if got, err := os.ReadFile(filepath.Join(target, "log")); err != nil || int64(len(got)) != n {
		t.Fatalf("after repair: %d bytes, %v; want %d", len(got), err, n)
	}
	e.teardown(id, target)
}

func listTree(t *testing.T, root string) []string {
	var out []string
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			out = append(out, strings.TrimPrefix(p, root)+" "+fi.Mode().String())
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// TestBadRequests: missing or wrong parameters, unknown volume IDs and
// target paths outside the kubelet directory are answered with the
// spec's codes, and nothing changes on disk.
func TestBadRequests(t *testing.T) {
	e := newEnv(t)
	e.startAll()
	ctx := testenv.Context(t, 2*time.Minute)
	c, n := e.controller(), e.node()
	okID, target := e.volume("good", 1<<20, nil)
	before := listTree(t, e.root)
	beforeK := listTree(t, e.targetRoot)
	caps := []*csipb.VolumeCapability{mountCap()}
	block := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	srv := map[string]string{ParamServer: "127.0.0.1"}
	with := func(k, v string) map[string]string {
		m := map[string]string{ParamServer: "127.0.0.1", k: v}
		return m
	}
	unknownID := volumeID{Server: "127.0.0.1", Share: "/", SubDir: "no-such-volume", OnDelete: "delete"}.String()
	cases := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"create: no name", func() error {
			_, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{VolumeCapabilities: caps, Parameters: srv})
			return err
		}, codes.InvalidArgument},
		{"create: no server", func() error {
			_, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps})
			return err
		}, codes.InvalidArgument},
		{"create: unknown parameter", func() error {
			_, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps, Parameters: with("color", "red")})
			return err
		}, codes.InvalidArgument},
		{"create: subDir escaping the share", func() error {
			_, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps, Parameters: with(ParamSubDir, "../etc")})
			return err
		}, codes.InvalidArgument},
		{"create: bad onDelete", func() error {
			_, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps, Parameters: with(ParamOnDelete, "shred")})
			return err
		}, codes.InvalidArgument},
		{"create: bad mountPermissions", func() error {
			_, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps, Parameters: with(ParamMountPermissions, "999")})
			return err
		}, codes.InvalidArgument},
		{"create: bad transport", func() error {
			_, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps, Parameters: with(ParamTransport, "udp")})
			return err
		}, codes.InvalidArgument},
		{"create: bad creditsPerPod", func() error {
			_, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps, Parameters: with(ParamCreditsPerPod, "0")})
			return err
		}, codes.InvalidArgument},
		{"create: block", func() error {
			_, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csipb.VolumeCapability{block}, Parameters: srv})
			return err
		}, codes.InvalidArgument},
		{"create: limit below required", func() error {
			_, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps, Parameters: srv,
				CapacityRange: &csipb.CapacityRange{RequiredBytes: 2 << 20, LimitBytes: 1 << 20}})
			return err
		}, codes.OutOfRange},
		{"create: same name, other size", func() error {
			_, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "good", VolumeCapabilities: caps, Parameters: srv,
				CapacityRange: &csipb.CapacityRange{RequiredBytes: 2 << 20}})
			return err
		}, codes.AlreadyExists},
		{"create: from an unknown snapshot", func() error {
			_, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "x", VolumeCapabilities: caps, Parameters: srv,
				VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
					Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: "s1#127.0.0.1#snap-none"}}}})
			return err
		}, codes.NotFound},
		{"publish: unknown volume", func() error {
			_, err := c.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: unknownID, NodeId: "node1@127.0.0.1", VolumeCapability: mountCap()})
			return err
		}, codes.NotFound},
		{"publish: garbage volume id", func() error {
			_, err := c.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: "../../etc", NodeId: "node1@127.0.0.1", VolumeCapability: mountCap()})
			return err
		}, codes.NotFound},
		{"publish: unknown node", func() error {
			_, err := c.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: okID, NodeId: "nonode", VolumeCapability: mountCap()})
			return err
		}, codes.NotFound},
		{"expand: unknown volume", func() error {
			_, err := c.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: unknownID, CapacityRange: &csipb.CapacityRange{RequiredBytes: 1}})
			return err
		}, codes.NotFound},
		{"snapshot: unknown volume", func() error {
			_, err := c.CreateSnapshot(ctx, &csipb.CreateSnapshotRequest{Name: "s", SourceVolumeId: unknownID})
			return err
		}, codes.NotFound},
		{"node publish: target outside the kubelet directory", func() error {
			_, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: okID, TargetPath: "/tmp/elsewhere", VolumeCapability: mountCap()})
			return err
		}, codes.InvalidArgument},
		{"node publish: target with ..", func() error {
			_, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: okID, TargetPath: e.targetRoot + "/pods/../../escape", VolumeCapability: mountCap()})
			return err
		}, codes.InvalidArgument},
		{"node publish: relative target", func() error {
			_, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: okID, TargetPath: "pods/x", VolumeCapability: mountCap()})
			return err
		}, codes.InvalidArgument},
		{"node publish: garbage volume id", func() error {
			_, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "garbage", TargetPath: e.targetRoot + "/pods/y/mount", VolumeCapability: mountCap()})
			return err
		}, codes.NotFound},
		{"node publish: bad mount flag", func() error {
			vc := mountCap()
			vc.GetMount().MountFlags = []string{"nosuchoption"}
			_, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: okID, TargetPath: e.targetRoot + "/pods/z/mount", VolumeCapability: vc})
			return err
		}, codes.InvalidArgument},
		{"node publish: block", func() error {
			_, err := n.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: okID, TargetPath: e.targetRoot + "/pods/b/mount", VolumeCapability: block})
			return err
		}, codes.InvalidArgument},
		{"node unpublish: outside", func() error {
			_, err := n.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: okID, TargetPath: "/etc"})
			return err
		}, codes.InvalidArgument},
		{"node stats: not mounted", func() error {
			_, err := n.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: okID, VolumePath: e.targetRoot + "/nothing"})
			return err
		}, codes.NotFound},
	}
	for _, tc := range cases {
		err := tc.call()
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if after := listTree(t, e.root); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("export changed by bad requests:\nbefore %q\nafter  %q", before, after)
	}
	if after := listTree(t, e.targetRoot); strings.Join(after, "\n") != strings.Join(beforeK, "\n") {
		t.Errorf("kubelet directory changed by bad requests:\nbefore %q\nafter  %q", beforeK, after)
	}
	if _, err := os.Stat("/tmp/elsewhere"); err == nil {
		t.Error("/tmp/elsewhere was created")
	}
	e.teardown(okID, target)
}

// TestOnDeleteAndSubDir: subDir templates name the directory; onDelete
// retain keeps it, archive renames it to archived-NAME, delete removes it.
func TestOnDeleteAndSubDir(t *testing.T) {
	e := newEnv(t)
	e.startServer()
	e.startController()
	ctx := testenv.Context(t, time.Minute)
	c := e.controller()
	for _, tc := range []struct{ onDelete, left string }{
		{"retain", "ns1/claim-retain"}, {"archive", "ns1/archived-claim-archive"}, {"delete", ""},
	} {
		cv, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pv-" + tc.onDelete,
			VolumeCapabilities: []*csipb.VolumeCapability{mountCap()},
			Parameters: map[string]string{ParamServer: "127.0.0.1", ParamOnDelete: tc.onDelete,
				ParamSubDir: "${pvc.metadata.namespace}/${pvc.metadata.name}", ParamMountPermissions: "0750",
				paramPVCName: "claim-" + tc.onDelete, paramPVCNamespace: "ns1", paramPVName: "pv-" + tc.onDelete}})
		if err != nil {
			t.Fatalf("%s: CreateVolume: %v", tc.onDelete, err)
		}
		dir := filepath.Join(e.root, "ns1", "claim-"+tc.onDelete)
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm() != 0o750 {
			t.Fatalf("%s: volume directory %s: %v %v, want mode 0750", tc.onDelete, dir, fi, err)
		}
		os.WriteFile(filepath.Join(dir, "data"), []byte(tc.onDelete), 0o644)
		if _, err := c.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: cv.GetVolume().GetVolumeId()}); err != nil {
			t.Fatalf("%s: DeleteVolume: %v", tc.onDelete, err)
		}
		if _, err := os.Stat(dir); tc.onDelete != "retain" && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %s still there: %v", tc.onDelete, dir, err)
		}
		if tc.left != "" {
			if b, err := os.ReadFile(filepath.Join(e.root, tc.left, "data")); err != nil || string(b) != tc.onDelete {
				t.Errorf("%s: %s/data: %q %v", tc.onDelete, tc.left, b, err)
			}
		}
		// deleting again is fine
		if _, err := c.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: cv.GetVolume().GetVolumeId()}); err != nil {
			t.Errorf("%s: second DeleteVolume: %v", tc.onDelete, err)
		}
	}
}

// TestReadOnlyAndServerGone: a read-only publish refuses writes (EROFS);
// with the export server gone, NodeUnpublishVolume still returns within
// its bound and leaves nothing mounted.
func TestReadOnlyAndServerGone(t *testing.T) {
	e := newEnv(t)
	e.startAll()
	ctx := testenv.Context(t, 2*time.Minute)
	id, target := e.volume("rw", 0, nil)
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	roTarget := filepath.Join(e.targetRoot, "pods", "ro", "mount")
	vc := map[string]string{}
	vid, _ := parseVolumeID(id)
	vc[ctxServer], vc[ctxExport] = vid.Server, vid.Path()
	// this pod's mount goes over TCP (a transport=tcp class)
	vc[ctxMountOptions] = "proto=tcp,port=" + strconv.Itoa(e.nfsPort) + ",mountport=" + strconv.Itoa(e.mountPort)
	vc[ctxCredits] = "8"
	if _, err := e.node().NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, TargetPath: roTarget,
		VolumeCapability: mountCap(), VolumeContext: vc, Readonly: true}); err != nil {
		t.Fatal("read-only NodePublishVolume:", err)
	}
	if b, err := os.ReadFile(filepath.Join(roTarget, "f")); err != nil || string(b) != "x" {
		t.Fatalf("read through the read-only mount: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(roTarget, "g"), []byte("y"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write through the read-only mount: %v, want EROFS", err)
	}
	// the server goes away; a pod still has a file open on the mount
	f, err := os.Open(filepath.Join(target, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e.stop("server", syscall.SIGKILL)
	for _, tg := range []string{target, roTarget} {
		start := time.Now()
		if _, err := e.node().NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: tg}); err != nil {
			t.Fatalf("NodeUnpublishVolume %s with the server gone: %v", tg, err)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("NodeUnpublishVolume took %v with the server gone", d)
		}
		if _, ok, _ := mountAt(tg); ok {
			t.Errorf("%s still mounted", tg)
		}
	}
}

// TestAdminAPINotYetListening: the export server starts NFS before its
// admin listener. A CreateVolume meanwhile fails Unavailable (the CO
// retries) instead of caching the server as a third-party one; once the
// admin API listens, the next CreateVolume registers the volume and its
// quota.
func TestAdminAPINotYetListening(t *testing.T) {
	e := newEnv(t)
	want := e.adminP
	// the server's admin API elsewhere: the controller's port refuses
	e.adminP = testenv.FreePort(t)
	e.startServer()
	e.adminP = want
	e.startController()
	ctx := testenv.Context(t, 2*time.Minute)
	req := &csipb.CreateVolumeRequest{Name: "early",
		CapacityRange:      &csipb.CapacityRange{RequiredBytes: 4 << 20},
		VolumeCapabilities: []*csipb.VolumeCapability{mountCap()},
		Parameters:         map[string]string{ParamServer: "127.0.0.1"}}
	if _, err := e.controller().CreateVolume(ctx, req); status.Code(err) != codes.Unavailable {
		t.Fatalf("CreateVolume with the admin API refusing: %v, want Unavailable", err)
	}
	// the admin API now listens where the controller looks
	e.stop("server", syscall.SIGTERM)
	e.startServer()
	cv, err := e.controller().CreateVolume(ctx, req)
	if err != nil {
		t.Fatal("CreateVolume with the admin API listening:", err)
	}
	vid, err := parseVolumeID(cv.GetVolume().GetVolumeId())
	if err != nil {
		t.Fatal(err)
	}
	a := admin.NewClient("http://127.0.0.1:"+strconv.Itoa(e.adminP), e.token, nil)
	v, err := a.GetVolume(ctx, vid.adminPath())
	if err != nil || v.QuotaBytes != 4<<20 {
		t.Fatalf("volume on the server: %+v %v; want registered with a 4 MiB quota", v, err)
	}
}
