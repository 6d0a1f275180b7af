//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	csicredits "github.com/nfsrdma/nfsrdma-csi/pkg/csi/credits"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

const (
	driverName      = "nfsrdma.csi.dev"
	ledgerNamespace = "nfsrdma-e2e" // where the controller keeps the credit ledger
	ledgerName      = "nfsrdma-credits"
	appNamespace    = "e2e-apps" // PVCs and the pod
	nodeName        = "e2e-node"
	nodeID          = nodeName + "@127.0.0.1"
	podName         = "app"
	credits         = 8
	quota           = int64(1 << 30)
)

// One PVC per StorageClass, each with its onDelete policy.
type claim struct {
	class, onDelete, pvc string
	pv, handle, subDir   string // known once bound
}

func TestE2E(t *testing.T) {
	e := newEnv(t)
	t.Cleanup(e.teardown)
	t.Cleanup(func() { e.cleanupCluster(t) })
	e.startServer()
	e.startController()
	e.startSidecars()

	claims := []*claim{
		{class: "nfsrdma-delete", onDelete: "delete", pvc: "data"},
		{class: "nfsrdma-retain", onDelete: "retain", pvc: "kept"},
		{class: "nfsrdma-archive", onDelete: "archive", pvc: "old"},
	}
	data := claims[0] // the pod's volume

	// Steps depend on the ones before: after a failure the rest skip.
	failed := ""
	step := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			if failed != "" {
				t.Skipf("skipped: step %q failed", failed)
			}
			e.alive(t)
			f(t)
			if !t.Failed() {
				e.alive(t)
			}
		})
		if t.Failed() && failed == "" {
			failed = name
		}
	}

	step("cluster-objects", func(t *testing.T) { e.createObjects(t, claims) })
	step("provision", func(t *testing.T) { e.provision(t, claims) })
	step("attach", func(t *testing.T) { e.attach(t, data) })
	step("credit-ledger-granted", func(t *testing.T) { e.ledgerGranted(t, data) })
	step("detach", func(t *testing.T) { e.detach(t, data) })
	step("credit-ledger-freed", func(t *testing.T) { e.ledgerFreed(t) })
	step("delete", func(t *testing.T) { e.deleteClaims(t, claims) })
	t.Run("events", func(t *testing.T) { e.events(t, claims) })
}

// createObjects makes what a cluster with the driver installed has (the
// CSIDriver, the StorageClasses, the namespaces) and what a kubelet would
// make (the Node with controller-managed attach/detach and its CSINode).
func (e *env) createObjects(t *testing.T, claims []*claim) {
	ctx := testenv.Context(t, 2*time.Minute)
	cs := e.cs
	for _, ns := range []string{ledgerNamespace, appNamespace} {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		mustCreate(t, "namespace "+ns, err)
	}
	yes := true
	_, err := cs.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: &yes, PodInfoOnMount: &yes,
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}},
	}, metav1.CreateOptions{})
	mustCreate(t, "CSIDriver", err)
	del := corev1.PersistentVolumeReclaimDelete
	for _, c := range claims {
		_, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
			ObjectMeta:    metav1.ObjectMeta{Name: c.class},
			Provisioner:   driverName,
			ReclaimPolicy: &del,
			Parameters: map[string]string{"server": "127.0.0.1", "onDelete": c.onDelete,
				"creditsPerPod": fmt.Sprint(credits)},
		}, metav1.CreateOptions{})
		mustCreate(t, "StorageClass "+c.class, err)
	}
	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        nodeName,
		Labels:      map[string]string{"kubernetes.io/hostname": nodeName},
		Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
	}}, metav1.CreateOptions{})
	mustCreate(t, "Node "+nodeName, err)
	e.nodeStatus(t, nil) // kubelet stand-in: the node is Ready
	_, err = cs.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driverName, NodeID: nodeID}}},
	}, metav1.CreateOptions{})
	mustCreate(t, "CSINode "+nodeName, err)
	// the service account admission plugin refuses pods until the
	// namespace's default ServiceAccount exists
	waitFor(t, time.Minute, "default ServiceAccount of "+appNamespace, func(ctx context.Context) (bool, string, error) {
		_, err := cs.CoreV1().ServiceAccounts(appNamespace).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "not there yet", nil
		}
		return err == nil, "", err
	})
	e.kubectl(t, "get", "csidriver", driverName, "-o", "wide")
	e.kubectl(t, "get", "storageclass", "-o", "custom-columns=NAME:.metadata.name,PROVISIONER:.provisioner,RECLAIM:.reclaimPolicy,PARAMETERS:.parameters")
	e.kubectl(t, "get", "node,csinode", "-o", "wide")
	e.kubectl(t, "get", "csinode", nodeName, "-o", "jsonpath={.spec.drivers}")
}

func mustCreate(t *testing.T, what string, err error) {
	t.Helper()
	if apierrors.IsAlreadyExists(err) {
		t.Fatalf("%s exists already: a leftover of an earlier run? Use a fresh control plane (hack/test-k8s starts one)", what)
	}
	if err != nil {
		t.Fatalf("create %s: %v", what, err)
	}
}

// nodeStatus plays the kubelet's part in the Node's status: Ready, and
// the volumes in use (the attach/detach controller does not detach a
// volume the node reports in use, and counts a volume as mounted until
// the node says otherwise).
func (e *env) nodeStatus(t *testing.T, inUse []corev1.UniqueVolumeName) {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", Message: "e2e kubelet stand-in", LastHeartbeatTime: now, LastTransitionTime: now}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
		n.Status.VolumesInUse = inUse
		_, err = e.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update the status of node %s: %v", nodeName, err)
	}
}

// provision: PVC -> CreateVolume (csi-provisioner) -> PV bound; the
// volume's directory is on the export and registered with its quota.
func (e *env) provision(t *testing.T, claims []*claim) {
	ctx := testenv.Context(t, 3*time.Minute)
	for _, c := range claims {
		class := c.class
		_, err := e.cs.CoreV1().PersistentVolumeClaims(appNamespace).Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: c.pvc},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: &class,
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: *resource.NewQuantity(quota, resource.BinarySI)}},
			},
		}, metav1.CreateOptions{})
		mustCreate(t, "PVC "+c.pvc, err)
	}
	e.kubectl(t, "get", "pvc", "-n", appNamespace)
	for _, c := range claims {
		waitFor(t, 2*time.Minute, "PVC "+c.pvc+" bound", func(ctx context.Context) (bool, string, error) {
			p, err := e.cs.CoreV1().PersistentVolumeClaims(appNamespace).Get(ctx, c.pvc, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			c.pv = p.Spec.VolumeName
			return p.Status.Phase == corev1.ClaimBound, fmt.Sprintf("phase %s, volume %q", p.Status.Phase, p.Spec.VolumeName), nil
		})
	}
	e.kubectl(t, "get", "pvc", "-n", appNamespace, "-o", "wide")
	e.kubectl(t, "get", "pv", "-o", "custom-columns=NAME:.metadata.name,CAPACITY:.spec.capacity.storage,RECLAIM:.spec.persistentVolumeReclaimPolicy,STATUS:.status.phase,CLAIM:.spec.claimRef.name,CLASS:.spec.storageClassName,HANDLE:.spec.csi.volumeHandle")
	e.kubectl(t, "get", "pv", claims[0].pv, "-o", "jsonpath={.spec.csi.volumeAttributes}")

	for _, c := range claims {
		pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, c.pv, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("PV %s of PVC %s: %v", c.pv, c.pvc, err)
		}
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != driverName {
			t.Fatalf("PV %s: not a CSI volume of %s: %+v", c.pv, driverName, pv.Spec.PersistentVolumeSource)
		}
		c.handle = pv.Spec.CSI.VolumeHandle
		// 1#SERVER#SHARE#SUBDIR#ONDELETE
		f := strings.Split(c.handle, "#")
		if len(f) != 5 || f[0] != "1" || f[1] != "127.0.0.1" || f[2] != "/" || f[4] != c.onDelete {
			t.Fatalf("PV %s: volume handle %q: want 1#127.0.0.1#/#SUBDIR#%s", c.pv, c.handle, c.onDelete)
		}
		c.subDir = f[3]
		if c.subDir != c.pv {
			t.Errorf("PV %s: subdirectory %q, want the PV name", c.pv, c.subDir)
		}
		if got := pv.Spec.Capacity.Storage().Value(); got != quota {
			t.Errorf("PV %s: capacity %d, want %d", c.pv, got, quota)
		}
		if got := pv.Spec.CSI.VolumeAttributes["creditsPerPod"]; got != fmt.Sprint(credits) {
			t.Errorf("PV %s: volume attribute creditsPerPod=%q, want %d", c.pv, got, credits)
		}
		if fi, err := os.Stat(filepath.Join(e.root, c.subDir)); err != nil || !fi.IsDir() {
			t.Errorf("PV %s: directory %s on the export: %v", c.pv, c.subDir, err)
		}
		v, err := e.admin.GetVolume(ctx, c.subDir)
		if err != nil {
			t.Fatalf("admin GetVolume %s: %v", c.subDir, err)
		}
		t.Logf("admin: volume %s: quota %d bytes, access %v, meta %v", v.Path, v.QuotaBytes, v.Access, v.Meta)
		if v.QuotaBytes != quota {
			t.Errorf("admin: volume %s: quota %d bytes, want %d", v.Path, v.QuotaBytes, quota)
		}
		if v.Meta["csi.volumeID"] != c.handle {
			t.Errorf("admin: volume %s: meta csi.volumeID=%q, want %q", v.Path, v.Meta["csi.volumeID"], c.handle)
		}
		if len(v.Access) != 0 {
			t.Errorf("admin: volume %s: granted before any attach: %v", v.Path, v.Access)
		}
	}
}

// volumeAttachment returns the VolumeAttachment of pv on our node, nil if
// there is none.
func (e *env) volumeAttachment(ctx context.Context, pv string) (*storagev1.VolumeAttachment, error) {
	l, err := e.cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range l.Items {
		va := &l.Items[i]
		if va.Spec.NodeName == nodeName && va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv {
			return va, nil
		}
	}
	return nil, nil
}

// attach: a pod with the PVC on the node -> the attach/detach controller
// makes a VolumeAttachment -> csi-attacher -> ControllerPublishVolume ->
// the node's address is granted on the export.
func (e *env) attach(t *testing.T, c *claim) {
	ctx := testenv.Context(t, 3*time.Minute)
	no := false
	_, err := e.cs.CoreV1().Pods(appNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName},
		Spec: corev1.PodSpec{
			NodeName:                     nodeName, // no scheduler
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.pvc}}}},
		},
	}, metav1.CreateOptions{})
	mustCreate(t, "pod "+podName, err)
	e.kubectl(t, "get", "pod", "-n", appNamespace, "-o", "wide")
	waitFor(t, 2*time.Minute, "VolumeAttachment of "+c.pv+" attached", func(ctx context.Context) (bool, string, error) {
		va, err := e.volumeAttachment(ctx, c.pv)
		if err != nil || va == nil {
			return false, "no VolumeAttachment yet", err
		}
		desc := fmt.Sprintf("%s attached=%v", va.Name, va.Status.Attached)
		if va.Status.AttachError != nil {
			desc += " attachError: " + va.Status.AttachError.Message
		}
		return va.Status.Attached, desc, nil
	})
	e.kubectl(t, "get", "volumeattachments", "-o", "wide")
	e.kubectl(t, "get", "volumeattachments", "-o", "custom-columns=NAME:.metadata.name,ATTACHER:.spec.attacher,PV:.spec.source.persistentVolumeName,NODE:.spec.nodeName,ATTACHED:.status.attached,FINALIZERS:.metadata.finalizers")
	e.kubectl(t, "get", "node", nodeName, "-o", "jsonpath={.status.volumesAttached}")

	v, err := e.admin.GetVolume(ctx, c.subDir)
	if err != nil {
		t.Fatalf("admin GetVolume %s: %v", c.subDir, err)
	}
	t.Logf("admin: volume %s: access %+v", v.Path, v.Access)
	i := slices.IndexFunc(v.Access, func(a admin.Access) bool { return a.Node == nodeID })
	if i < 0 {
		t.Fatalf("admin: volume %s: node %s not granted: %+v", v.Path, nodeID, v.Access)
	}
	if a := v.Access[i]; !slices.Contains(a.Addrs, "127.0.0.1") || a.ReadOnly {
		t.Fatalf("admin: volume %s: grant of %s is %+v, want address 127.0.0.1 read-write", v.Path, nodeID, a)
	}
	// kubelet stand-in: the node reports the volume mounted
	e.nodeStatus(t, []corev1.UniqueVolumeName{uniqueName(c)})

	// The controller pod replaced (the driver and its sidecars restart
	// together, as a rollout or an eviction does): the new driver has made
	// no volume and is given no --server, so its ListVolumes must find the
	// export server through the PersistentVolumes.
	for _, n := range []string{"csi-attacher", "csi-provisioner", "controller"} {
		e.stop(n)
	}
	e.startController()
	e.startSidecars()

	// csi-attacher's reconciler compares every VolumeAttachment with our
	// ListVolumes' published nodes: two rounds after the attach (one
	// complete), the VolumeAttachment must still be attached and the
	// attacher must have found nothing amiss.
	const round = "Reconciling VolumeAttachments with driver backend state"
	n0 := len(e.logLines("csi-attacher", round))
	waitFor(t, time.Minute, "two csi-attacher reconcile rounds (ListVolumes)", func(context.Context) (bool, string, error) {
		n := len(e.logLines("csi-attacher", round)) - n0
		return n >= 2, fmt.Sprintf("%d rounds", n), nil
	})
	for _, bad := range [][]string{{"do not match"}, {"ListVolumes", "ailed"}} {
		if l := e.logLines("csi-attacher", bad...); len(l) > 0 {
			t.Errorf("csi-attacher's reconciler disagrees with our ListVolumes:\n%s", strings.Join(l, "\n"))
		}
	}
	va, err := e.volumeAttachment(ctx, c.pv)
	if err != nil || va == nil || !va.Status.Attached {
		t.Fatalf("VolumeAttachment of %s after the attacher's reconcile: %+v (%v)", c.pv, va, err)
	}
}

// uniqueName is the attach/detach controller's name of a CSI volume.
func uniqueName(c *claim) corev1.UniqueVolumeName {
	return corev1.UniqueVolumeName("kubernetes.io/csi/" + driverName + "^" + c.handle)
}

// ledgerEntry reads the pod's entry of the credit ledger ("" if none).
func (e *env) ledgerEntry(ctx context.Context) (string, map[string]string, error) {
	cm, err := e.cs.CoreV1().ConfigMaps(ledgerNamespace).Get(ctx, ledgerName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	return cm.Data[appNamespace+"."+podName], cm.Data, nil
}

func (e *env) ledgerGranted(t *testing.T, c *claim) {
	key := appNamespace + "." + podName
	var val string
	waitFor(t, 2*time.Minute, "credit ledger entry "+key+" granted", func(ctx context.Context) (bool, string, error) {
		v, all, err := e.ledgerEntry(ctx)
		if err != nil {
			return false, "", err
		}
		val = v
		if all == nil {
			return false, "no ConfigMap " + ledgerNamespace + "/" + ledgerName, nil
		}
		if v == "" {
			return false, fmt.Sprintf("no key %s in %v", key, all), nil
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return false, fmt.Sprintf("%s=%q: not JSON: %v", key, v, err), nil
		}
		g, _ := m["granted"].(float64)
		return g == credits, fmt.Sprintf("%s=%s", key, v), nil
	})
	e.kubectl(t, "get", "configmap", ledgerName, "-n", ledgerNamespace, "-o", "yaml")
	if !strings.Contains(val, c.pv) {
		t.Errorf("ledger entry %s=%s does not name the volume %s", key, val, c.pv)
	}
	// The controller pushed the grant to the export server, which grants it
	// to the connections of the pod's mounts (AUTH_SYS machine name).
	e.serverGrant(t, credits)
}

// serverGrant waits until the export server's admin API holds want
// credits for the pod's machine name (0: no grant).
func (e *env) serverGrant(t *testing.T, want int) {
	machine := csicredits.MachineName(nodeName, appNamespace, podName)
	waitFor(t, 2*time.Minute, fmt.Sprintf("export server grant %s=%d", machine, want), func(ctx context.Context) (bool, string, error) {
		cr, err := e.admin.GetCredits(ctx)
		if err != nil {
			return false, "", err
		}
		return cr.Grants[machine] == want, fmt.Sprintf("grants %v", cr.Grants), nil
	})
	t.Logf("admin: export server grants %s=%d", machine, want)
}

// detach: pod deleted -> the attach/detach controller deletes the
// VolumeAttachment -> csi-attacher -> ControllerUnpublishVolume -> the
// node's grant is revoked on the export.
func (e *env) detach(t *testing.T, c *claim) {
	ctx := testenv.Context(t, 6*time.Minute)
	zero := int64(0)
	// no kubelet confirms a graceful deletion: delete at once
	if err := e.cs.CoreV1().Pods(appNamespace).Delete(ctx, podName, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatalf("delete pod %s: %v", podName, err)
	}
	waitFor(t, time.Minute, "pod "+podName+" gone", func(ctx context.Context) (bool, string, error) {
		_, err := e.cs.CoreV1().Pods(appNamespace).Get(ctx, podName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still there", err
	})
	e.kubectl(t, "get", "pod,pvc", "-n", appNamespace)
	// kubelet stand-in: the pod's volume is unmounted
	e.nodeStatus(t, nil)
	waitFor(t, 4*time.Minute, "VolumeAttachment of "+c.pv+" deleted", func(ctx context.Context) (bool, string, error) {
		va, err := e.volumeAttachment(ctx, c.pv)
		if err != nil {
			return false, "", err
		}
		if va == nil {
			return true, "", nil
		}
		desc := fmt.Sprintf("%s attached=%v deletionTimestamp=%v", va.Name, va.Status.Attached, va.DeletionTimestamp)
		if va.Status.DetachError != nil {
			desc += " detachError: " + va.Status.DetachError.Message
		}
		return false, desc, nil
	})
	e.kubectl(t, "get", "volumeattachments", "-o", "wide")
	v, err := e.admin.GetVolume(ctx, c.subDir)
	if err != nil {
		t.Fatalf("admin GetVolume %s: %v", c.subDir, err)
	}
	t.Logf("admin: volume %s: access %+v", v.Path, v.Access)
	if len(v.Access) != 0 {
		t.Fatalf("admin: volume %s: still granted after detach: %+v", v.Path, v.Access)
	}
}

func (e *env) ledgerFreed(t *testing.T) {
	key := appNamespace + "." + podName
	waitFor(t, 2*time.Minute, "credit ledger entry "+key+" removed", func(ctx context.Context) (bool, string, error) {
		v, all, err := e.ledgerEntry(ctx)
		if err != nil {
			return false, "", err
		}
		if all == nil {
			return false, "no ConfigMap " + ledgerNamespace + "/" + ledgerName, nil
		}
		return v == "", fmt.Sprintf("%s=%s", key, v), nil
	})
	e.kubectl(t, "get", "configmap", ledgerName, "-n", ledgerNamespace, "-o", "yaml")
	e.serverGrant(t, 0)
}

// deleteClaims: PVC deleted -> PV released -> DeleteVolume -> the
// directory is removed, kept or archived per onDelete.
func (e *env) deleteClaims(t *testing.T, claims []*claim) {
	ctx := testenv.Context(t, 4*time.Minute)
	for _, c := range claims {
		if err := e.cs.CoreV1().PersistentVolumeClaims(appNamespace).Delete(ctx, c.pvc, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete PVC %s: %v", c.pvc, err)
		}
	}
	e.kubectl(t, "get", "pvc", "-n", appNamespace)
	e.kubectl(t, "get", "pv")
	for _, c := range claims {
		waitFor(t, 3*time.Minute, "PV "+c.pv+" deleted", func(ctx context.Context) (bool, string, error) {
			pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, c.pv, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, "", nil
			}
			if err != nil {
				return false, "", err
			}
			return false, fmt.Sprintf("phase %s (%s) finalizers %v", pv.Status.Phase, pv.Status.Message, pv.Finalizers), nil
		})
	}
	e.kubectl(t, "get", "pvc", "-n", appNamespace)
	e.kubectl(t, "get", "pv")
	ents, _ := os.ReadDir(e.root)
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	t.Logf("export root after the deletes: %v", names)

	for _, c := range claims {
		_, err := e.admin.GetVolume(ctx, c.subDir)
		if !errors.Is(err, admin.ErrNotFound) {
			t.Errorf("admin: volume %s (onDelete=%s) after DeleteVolume: %v, want not found", c.subDir, c.onDelete, err)
		}
		dir := filepath.Join(e.root, c.subDir)
		archived := filepath.Join(e.root, "archived-"+c.subDir)
		switch c.onDelete {
		case "delete":
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("onDelete=delete: directory %s still there (%v)", c.subDir, err)
			}
		case "retain":
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				t.Errorf("onDelete=retain: directory %s not kept: %v", c.subDir, err)
			}
		case "archive":
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("onDelete=archive: directory %s still there (%v)", c.subDir, err)
			}
			if fi, err := os.Stat(archived); err != nil || !fi.IsDir() {
				t.Errorf("onDelete=archive: no archived-%s: %v", c.subDir, err)
			}
		}
	}
}

// events shows the cluster's events and checks the provisioner's.
func (e *env) events(t *testing.T, claims []*claim) {
	e.kubectl(t, "get", "events", "-A", "--sort-by=.metadata.creationTimestamp")
	ctx := testenv.Context(t, time.Minute)
	l, err := e.cs.CoreV1().Events(appNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	for _, c := range claims {
		if c.pv == "" {
			continue // never provisioned: the provision step reported it
		}
		ok := slices.ContainsFunc(l.Items, func(ev corev1.Event) bool {
			return ev.InvolvedObject.Kind == "PersistentVolumeClaim" && ev.InvolvedObject.Name == c.pvc && ev.Reason == "ProvisioningSucceeded"
		})
		if !ok {
			t.Errorf("no ProvisioningSucceeded event for PVC %s", c.pvc)
		}
	}
}

// cleanupCluster removes what the test made (best effort, so that a
// long-lived cluster can run it again); with hack/test-k8s the control
// plane goes away anyway. A failed test first gets the events.
func (e *env) cleanupCluster(t *testing.T) {
	if t.Failed() {
		e.kubectl(t, "get", "events", "-A", "--sort-by=.metadata.creationTimestamp")
		e.kubectl(t, "get", "pvc,pod", "-n", appNamespace, "-o", "wide")
		e.kubectl(t, "get", "pv,volumeattachments", "-o", "wide")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	cs := e.cs
	_ = cs.CoreV1().Pods(appNamespace).Delete(ctx, podName, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	for _, p := range []string{"data", "kept", "old"} {
		_ = cs.CoreV1().PersistentVolumeClaims(appNamespace).Delete(ctx, p, metav1.DeleteOptions{})
	}
	for _, c := range []string{"nfsrdma-delete", "nfsrdma-retain", "nfsrdma-archive"} {
		_ = cs.StorageV1().StorageClasses().Delete(ctx, c, metav1.DeleteOptions{})
	}
	_ = cs.StorageV1().CSINodes().Delete(ctx, nodeName, metav1.DeleteOptions{})
	_ = cs.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{})
	_ = cs.StorageV1().CSIDrivers().Delete(ctx, driverName, metav1.DeleteOptions{})
	for _, ns := range []string{appNamespace, ledgerNamespace} {
		_ = cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	}
}
