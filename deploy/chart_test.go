package deploy_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

const (
	driverName   = "nfsrdma.csi.dev"
	controllerNm = releaseName + "-controller"
	nodeNm       = releaseName + "-node"
	mounterNm    = releaseName + "-mounter"
	serverNm     = releaseName + "-server"
)

func TestChartLint(t *testing.T) {
	for _, sets := range [][]string{
		nil,
		{"server.enabled=false", "storageClass.parameters.server=nfs.example.com"},
		{"node.mounter.rdmaDevices=none", "volumeSnapshotClass.create=true"},
		{"node.registration.mode=builtin", "controller.livenessProbe.mode=builtin"},
	} {
		args := []string{"lint", "--strict", chartDir, "--kube-version", kubeVersion}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		if out, err := runHelm(t, args...); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

func TestChartDefaults(t *testing.T) {
	objs := renderObjects(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.kind]++
		if o.namespace != "" && o.namespace != namespace {
			t.Errorf("%s %s in namespace %q, want %q", o.kind, o.name, o.namespace, namespace)
		}
	}
	want := map[string]int{"CSIDriver": 1, "Deployment": 1, "DaemonSet": 2, "StatefulSet": 1, "Service": 1,
		"NetworkPolicy": 1, "PodDisruptionBudget": 1, "ServiceAccount": 3, "Secret": 1, "StorageClass": 1,
		"ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 2, "RoleBinding": 2}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("rendered kinds %v, want %v", kinds, want)
	}

	t.Run("CSIDriver", func(t *testing.T) { checkCSIDriver(t, objs) })
	t.Run("Controller", func(t *testing.T) { checkController(t, objs) })
	t.Run("Node", func(t *testing.T) { checkNode(t, objs) })
	t.Run("Server", func(t *testing.T) { checkServer(t, objs) })
	t.Run("StorageClass", func(t *testing.T) { checkStorageClass(t, objs) })
	t.Run("RBAC", func(t *testing.T) { checkRBAC(t, objs) })
	t.Run("Pods", func(t *testing.T) { checkPods(t, objs) })
	t.Run("AdminToken", func(t *testing.T) {
		s := find[*corev1.Secret](t, objs, "Secret", "nfsrdma-csi-admin")
		if n := len(s.Data["token"]); n != 48 {
			t.Errorf("generated admin token has %d bytes, want 48", n)
		}
	})
}

func checkCSIDriver(t *testing.T, objs []object) {
	d := find[*storagev1.CSIDriver](t, objs, "CSIDriver", driverName)
	s := d.Spec
	if s.AttachRequired == nil || !*s.AttachRequired {
		t.Error("attachRequired is not true (ControllerPublish manages export ACLs)")
	}
	if s.PodInfoOnMount == nil || !*s.PodInfoOnMount {
		t.Error("podInfoOnMount is not true (one FUSE mount per pod)")
	}
	if s.FSGroupPolicy == nil || *s.FSGroupPolicy != storagev1.FileFSGroupPolicy {
		t.Errorf("fsGroupPolicy %v, want File", s.FSGroupPolicy)
	}
	if want := []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}; !reflect.DeepEqual(s.VolumeLifecycleModes, want) {
		t.Errorf("volumeLifecycleModes %v, want %v", s.VolumeLifecycleModes, want)
	}
}

func container(t *testing.T, spec *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

func containerNames(spec *corev1.PodSpec) []string {
	var names []string
	for _, c := range spec.Containers {
		names = append(names, c.Name)
	}
	return names
}

func mountAt(c *corev1.Container, path string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == path {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func volume(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

func hasAll[S ~string](list []S, want ...S) bool {
	for _, w := range want {
		if !slices.Contains(list, w) {
			return false
		}
	}
	return true
}

func checkController(t *testing.T, objs []object) {
	d := find[*appsv1.Deployment](t, objs, "Deployment", controllerNm)
	spec := &d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	if got, want := containerNames(spec), []string{"driver", "csi-provisioner", "csi-attacher", "csi-snapshotter", "csi-resizer", "liveness-probe"}; !reflect.DeepEqual(got, want) {
		t.Errorf("containers %v, want %v", got, want)
	}
	if spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName %q", spec.PriorityClassName)
	}
	if spec.ServiceAccountName != "nfsrdma-csi-controller" {
		t.Errorf("serviceAccountName %q", spec.ServiceAccountName)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("controller pod may run as root")
	}
	drv := container(t, spec, "driver")
	wantArgs := []string{"controller", "--endpoint=unix:///csi/csi.sock", "--admin-token-file=/etc/nfsrdma/admin/token",
		"--admin-port=20050", "--nlm-port=4045", "--credits-budget=512", "--namespace=" + namespace, "--metrics-address=:9810", "--leader-election", "--leader-election-namespace=" + namespace, "--v=2"}
	if !reflect.DeepEqual(drv.Args, wantArgs) {
		t.Errorf("driver args %v, want %v", drv.Args, wantArgs)
	}
	if m := mountAt(drv, "/etc/nfsrdma/admin"); m == nil || !m.ReadOnly {
		t.Error("admin token not mounted read-only at /etc/nfsrdma/admin")
	} else if v := volume(spec, m.Name); v == nil || v.Secret == nil || v.Secret.SecretName != "nfsrdma-csi-admin" {
		t.Errorf("admin token volume %+v", v)
	}
	// the chart's default sidecars are the versions hack/cluster tests
	v := clusterVersions(t)
	images := map[string]string{
		"csi-provisioner": "registry.k8s.io/sig-storage/csi-provisioner:" + v["PROV"],
		"csi-attacher":    "registry.k8s.io/sig-storage/csi-attacher:" + v["ATT"],
		"csi-snapshotter": "registry.k8s.io/sig-storage/csi-snapshotter:" + v["SNAPSHOTTER"],
		"csi-resizer":     "registry.k8s.io/sig-storage/csi-resizer:" + v["RESIZER"],
		"liveness-probe":  "registry.k8s.io/sig-storage/livenessprobe:",
		"driver":          "ghcr.io/nfsrdma/nfsrdma-csi:v0.1.0",
	}
	for name, img := range images {
		c := container(t, spec, name)
		if !strings.HasPrefix(c.Image, img) {
			t.Errorf("%s image %q, want %q...", name, c.Image, img)
		}
		if c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation ||
			c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
			t.Errorf("%s: securityContext not restricted: %+v", name, c.SecurityContext)
		}
		if name == "driver" || name == "liveness-probe" {
			continue
		}
		if !hasAll(c.Args, "--csi-address=$(ADDRESS)", "--leader-election", "--leader-election-namespace="+namespace) {
			t.Errorf("%s args %v lack the CSI address or leader election", name, c.Args)
		}
	}
	// the second DeleteVolume attempt after a pod goes away must come after
	// kubelet's next node status (10 s), when the volume is detached
	if p := container(t, spec, "csi-provisioner"); !hasAll(p.Args, "--retry-interval-start=15s") {
		t.Errorf("csi-provisioner args %v lack --retry-interval-start=15s", p.Args)
	}
	lp := container(t, spec, "liveness-probe")
	if !hasAll(lp.Args, "--csi-address=/csi/csi.sock", "--health-port=29752") {
		t.Errorf("liveness-probe args %v", lp.Args)
	}
	if drv.LivenessProbe == nil || drv.LivenessProbe.HTTPGet == nil || drv.LivenessProbe.HTTPGet.Port.StrVal != "healthz" {
		t.Errorf("driver liveness probe %+v", drv.LivenessProbe)
	}

	pdb := find[*policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", controllerNm)
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("PDB selector %v does not select the controller pods (%v)", pdb.Spec.Selector, err)
	}
}

func checkNode(t *testing.T, objs []object) {
	ds := find[*appsv1.DaemonSet](t, objs, "DaemonSet", nodeNm)
	spec := &ds.Spec.Template.Spec
	if got, want := containerNames(spec), []string{"driver", "node-driver-registrar", "liveness-probe"}; !reflect.DeepEqual(got, want) {
		t.Errorf("containers %v, want %v", got, want)
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", spec.PriorityClassName)
	}
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v dnsPolicy %v", spec.HostNetwork, spec.DNSPolicy)
	}
	if spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Error("node pods get no API token: the node plugin reads the credit ledger")
	}
	if len(spec.Tolerations) == 0 || spec.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("tolerations %v: the node plugin must run on every node", spec.Tolerations)
	}

	drv := container(t, spec, "driver")
	wantArgs := []string{"node", "--endpoint=unix:///csi/csi.sock", "--nodeid=$(NODE_NAME)", "--node-address=$(NODE_IP)",
		"--mounter-socket=/var/lib/nfsrdma/mounter.sock", "--namespace=" + namespace, "--device-plugin=true",
		"--device-plugin-dir=/var/lib/kubelet/device-plugins", "--resource-name=nfsrdma.csi.dev/hca",
		"--metrics-address=:9811", "--enable-fuse-uring=true", "--v=2"}
	if !reflect.DeepEqual(drv.Args, wantArgs) {
		t.Errorf("driver args %v, want %v", drv.Args, wantArgs)
	}
	env := map[string]string{}
	for _, e := range drv.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["NODE_NAME"] != "spec.nodeName" || env["NODE_IP"] != "status.hostIP" {
		t.Errorf("driver env from fields %v", env)
	}
	if sc := drv.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Error("node driver container not privileged")
	}
	pods := mountAt(drv, "/var/lib/kubelet/pods")
	if pods == nil || pods.MountPropagation == nil || *pods.MountPropagation != corev1.MountPropagationBidirectional {
		t.Errorf("pods dir mount %+v, want Bidirectional", pods)
	}
	hostPaths := map[string]struct {
		path string
		typ  corev1.HostPathType
	}{
		"/var/lib/kubelet/pods":           {"/var/lib/kubelet/pods", corev1.HostPathDirectory},
		"/dev/fuse":                       {"/dev/fuse", corev1.HostPathCharDev},
		"/var/lib/kubelet/device-plugins": {"/var/lib/kubelet/device-plugins", corev1.HostPathDirectoryOrCreate},
		"/csi":                            {"/var/lib/kubelet/plugins/" + driverName, corev1.HostPathDirectoryOrCreate},
		"/var/lib/nfsrdma":                {"/var/lib/nfsrdma", corev1.HostPathDirectoryOrCreate},
	}
	for mp, want := range hostPaths {
		m := mountAt(drv, mp)
		if m == nil {
			t.Errorf("driver has no mount at %s", mp)
			continue
		}
		v := volume(spec, m.Name)
		if v == nil || v.HostPath == nil || v.HostPath.Path != want.path || v.HostPath.Type == nil || *v.HostPath.Type != want.typ {
			t.Errorf("volume for %s: %+v, want hostPath %s type %s", mp, v, want.path, want.typ)
		}
	}
	// Only privileged containers may use Bidirectional propagation.
	for _, c := range spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional &&
				(c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged) {
				t.Errorf("container %s: Bidirectional mount %s without privileged", c.Name, m.MountPath)
			}
		}
	}

	checkMounter(t, objs, drv)

	reg := container(t, spec, "node-driver-registrar")
	if !hasAll(reg.Args, "--csi-address=/csi/csi.sock", "--kubelet-registration-path=/var/lib/kubelet/plugins/"+driverName+"/csi.sock") {
		t.Errorf("registrar args %v", reg.Args)
	}
	if rm := mountAt(reg, "/registration"); rm == nil {
		t.Error("registrar has no /registration mount")
	} else if v := volume(spec, rm.Name); v == nil || v.HostPath == nil || v.HostPath.Path != "/var/lib/kubelet/plugins_registry" {
		t.Errorf("registration volume %+v", v)
	}
	lp := container(t, spec, "liveness-probe")
	if !hasAll(lp.Args, "--health-port=29753") {
		t.Errorf("liveness-probe args %v", lp.Args)
	}
	found := false
	for _, p := range drv.Ports {
		found = found || (p.Name == "healthz" && p.ContainerPort == 29753)
	}
	if !found || drv.LivenessProbe == nil || drv.LivenessProbe.HTTPGet == nil {
		t.Errorf("driver liveness: ports %v probe %+v", drv.Ports, drv.LivenessProbe)
	}
}

func checkServer(t *testing.T, objs []object) {
	ss := find[*appsv1.StatefulSet](t, objs, "StatefulSet", serverNm)
	spec := &ss.Spec.Template.Spec
	c := container(t, spec, "server")
	// no --export: the root is exported to no one, each volume to its nodes
	wantArgs := []string{"server", "--root=/export", "--listen=0.0.0.0", "--nfs-port=2049",
		"--mount-port=20048", "--rdma-port=20049", "--nlm-port=4045", "--nsm-port=4046", "--nsm-name=" + serverNm + "." + namespace + ".svc.cluster.local", "--credits=32", "--credits-budget=512", "--rdma-read-chunks=true", "--rdma-send-ddp=true", "--admin-listen=0.0.0.0:20050",
		"--admin-token-file=/etc/nfsrdma/admin/token", "--state-dir=/var/lib/nfsrdma-server", "--read-map-bytes=268435456", "--metrics-address=:9812", "--v=2"}
	if !reflect.DeepEqual(c.Args, wantArgs) {
		t.Errorf("server args %v, want %v", c.Args, wantArgs)
	}
	if len(ss.Spec.VolumeClaimTemplates) != 1 || ss.Spec.VolumeClaimTemplates[0].Name != "export" {
		t.Errorf("volumeClaimTemplates %v", ss.Spec.VolumeClaimTemplates)
	}
	// the token's Secret is mounted whole (a subPath mount would never see
	// a rotated token)
	if m := mountAt(c, "/etc/nfsrdma/admin"); m == nil || m.SubPath != "" || !m.ReadOnly {
		t.Errorf("admin token mount %+v", m)
	}
	if m := mountAt(c, "/export"); m == nil || m.Name != "export" {
		t.Errorf("/export mount %+v", m)
	}
	if sc := c.SecurityContext; sc == nil || (sc.Privileged != nil && *sc.Privileged) || sc.Capabilities == nil ||
		!slices.Contains(sc.Capabilities.Drop, "ALL") || !hasAll(sc.Capabilities.Add, "DAC_READ_SEARCH", "IPC_LOCK") {
		t.Errorf("server securityContext %+v", sc)
	}

	svc := find[*corev1.Service](t, objs, "Service", serverNm)
	ports := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p.Port
	}
	if want := map[string]int32{"nfs": 2049, "mount": 20048, "nfs-rdma": 20049, "nlm": 4045, "nsm": 4046, "admin": 20050}; !maps.Equal(ports, want) {
		t.Errorf("service ports %v, want %v", ports, want)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ss.Spec.Template.Labels)) {
		t.Error("service does not select the server pods")
	}

	np := find[*networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", serverNm)
	ctrl := find[*appsv1.Deployment](t, objs, "Deployment", controllerNm)
	sel, _ := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if !sel.Matches(labels.Set(ss.Spec.Template.Labels)) {
		t.Error("NetworkPolicy does not select the server pods")
	}
	adminOpen := false
	for _, rule := range np.Spec.Ingress {
		hasAdmin := false
		for _, p := range rule.Ports {
			hasAdmin = hasAdmin || (p.Port != nil && p.Port.String() == "admin")
		}
		if !hasAdmin {
			continue
		}
		if len(rule.From) == 0 {
			adminOpen = true
		}
		for _, peer := range rule.From {
			ps, _ := metav1.LabelSelectorAsSelector(peer.PodSelector)
			if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil ||
				!ps.Matches(labels.Set(ctrl.Spec.Template.Labels)) || ps.Matches(labels.Set(ss.Spec.Template.Labels)) {
				adminOpen = true
			}
		}
		if len(rule.Ports) != 1 {
			t.Errorf("admin rule opens more ports: %v", rule.Ports)
		}
	}
	if adminOpen {
		t.Error("NetworkPolicy lets more than the controller pods reach the admin port")
	}
	// with no node CIDRs set, the NFS ports admit no one
	if from, ok := nfsPortSources(t, np); ok {
		t.Errorf("NetworkPolicy admits %v to the NFS ports without server.networkPolicy.nodeCIDRs", from)
	}
}

// nfsPorts are the export server's ports a client mounts through.
var nfsPorts = []string{"nfs", "mount", "nfs-rdma", "nlm", "nsm"}

// nfsPortSources returns the sources the NetworkPolicy np admits to the
// NFS ports (ok false: none; a nil list with ok: every source), failing t
// when a rule opens only some of them or mixes them with other ports.
func nfsPortSources(t *testing.T, np *networkingv1.NetworkPolicy) (from []networkingv1.NetworkPolicyPeer, ok bool) {
	t.Helper()
	for _, rule := range np.Spec.Ingress {
		var names []string
		for _, p := range rule.Ports {
			if p.Port != nil {
				names = append(names, p.Port.String())
			}
		}
		if !slices.ContainsFunc(names, func(n string) bool { return slices.Contains(nfsPorts, n) }) {
			continue
		}
		slices.Sort(names)
		want := slices.Sorted(slices.Values(nfsPorts))
		if !slices.Equal(names, want) {
			t.Errorf("NFS rule ports %v, want %v", names, want)
		}
		if ok {
			t.Error("two NetworkPolicy rules for the NFS ports")
		}
		from, ok = rule.From, true
	}
	return from, ok
}

func checkStorageClass(t *testing.T, objs []object) {
	sc := find[*storagev1.StorageClass](t, objs, "StorageClass", "nfsrdma")
	if sc.Provisioner != driverName {
		t.Errorf("provisioner %q", sc.Provisioner)
	}
	if sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion {
		t.Error("allowVolumeExpansion not true")
	}
	allowed := []string{"server", "share", "subDir", "onDelete", "mountPermissions", "transport", "creditsPerPod"}
	for k := range sc.Parameters {
		if !slices.Contains(allowed, k) {
			t.Errorf("parameter %q is not one the driver knows", k)
		}
	}
	want := map[string]string{"server": serverNm + "." + namespace + ".svc.cluster.local", "share": "/",
		"onDelete": "delete", "mountPermissions": "0777", "transport": "rdma", "creditsPerPod": "16"}
	if !maps.Equal(sc.Parameters, want) {
		t.Errorf("parameters %v, want %v", sc.Parameters, want)
	}
}

// checkRBAC checks least privilege: no wildcards, no Secrets, nothing that
// grants rights (bind, escalate, impersonate), namespaced data only in the
// Role, and the exact verbs the driver itself was promised.
func checkRBAC(t *testing.T, objs []object) {
	cr := find[*rbacv1.ClusterRole](t, objs, "ClusterRole", controllerNm)
	role := find[*rbacv1.Role](t, objs, "Role", controllerNm)
	verbs := func(rules []rbacv1.PolicyRule, group, resource string) []string {
		var v []string
		for _, r := range rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) {
				v = append(v, r.Verbs...)
			}
		}
		slices.Sort(v)
		return v
	}
	for _, set := range []struct {
		name  string
		rules []rbacv1.PolicyRule
	}{{"ClusterRole", cr.Rules}, {"Role", role.Rules}} {
		for _, r := range set.rules {
			for _, s := range slices.Concat(r.APIGroups, r.Resources, r.Verbs) {
				if strings.Contains(s, "*") {
					t.Errorf("%s rule %+v has a wildcard", set.name, r)
				}
			}
			for _, v := range r.Verbs {
				if v == "bind" || v == "escalate" || v == "impersonate" || v == "deletecollection" {
					t.Errorf("%s grants %q", set.name, v)
				}
			}
			if slices.Contains(r.Resources, "secrets") {
				t.Errorf("%s grants access to secrets", set.name)
			}
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("%s grants non-resource URLs %v", set.name, r.NonResourceURLs)
			}
		}
	}
	for _, res := range []string{"configmaps"} {
		if v := verbs(cr.Rules, "", res); len(v) > 0 {
			t.Errorf("ClusterRole grants %v on %s cluster-wide", v, res)
		}
	}
	if v := verbs(cr.Rules, "coordination.k8s.io", "leases"); len(v) > 0 {
		t.Errorf("ClusterRole grants %v on leases cluster-wide", v)
	}
	if got, want := verbs(role.Rules, "", "configmaps"), []string{"create", "get", "list", "patch", "update", "watch"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Role configmaps verbs %v, want %v", got, want)
	}
	if got := verbs(role.Rules, "coordination.k8s.io", "leases"); !hasAll(got, "get", "create", "update") {
		t.Errorf("Role leases verbs %v: leader election needs get, create, update", got)
	}
	if got, want := verbs(cr.Rules, "", "pods"), []string{"get", "list", "watch"}; !reflect.DeepEqual(got, want) {
		t.Errorf("pods verbs %v, want %v", got, want)
	}
	if got := verbs(cr.Rules, "", "persistentvolumeclaims"); !hasAll(got, "get", "list", "watch") || slices.Contains(got, "delete") || slices.Contains(got, "create") {
		t.Errorf("persistentvolumeclaims verbs %v", got)
	}
	if got := verbs(cr.Rules, "", "events"); !hasAll(got, "create", "patch") {
		t.Errorf("events verbs %v", got)
	}
	if got := verbs(cr.Rules, "storage.k8s.io", "volumeattachments"); !hasAll(got, "get", "list", "watch", "patch") || slices.Contains(got, "delete") {
		t.Errorf("volumeattachments verbs %v", got)
	}

	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, o := range objs {
			if o.kind != kind {
				continue
			}
			var subjects []rbacv1.Subject
			var ref rbacv1.RoleRef
			switch b := o.obj.(type) {
			case *rbacv1.ClusterRoleBinding:
				subjects, ref = b.Subjects, b.RoleRef
			case *rbacv1.RoleBinding:
				subjects, ref = b.Subjects, b.RoleRef
			}
			if o.name == "nfsrdma-csi-node" { // the node plugin: reads the ledger ConfigMap only
				if ref.Name != o.name || len(subjects) != 1 || subjects[0].Name != "nfsrdma-csi-node" || subjects[0].Namespace != namespace {
					t.Errorf("%s %s binds %v to %v", kind, o.name, subjects, ref)
				}
				continue
			}
			if ref.Name != controllerNm || len(subjects) != 1 || subjects[0].Kind != "ServiceAccount" ||
				subjects[0].Name != "nfsrdma-csi-controller" || subjects[0].Namespace != namespace {
				t.Errorf("%s %s binds %v to %v", kind, o.name, subjects, ref)
			}
		}
	}
}

// checkPods checks every pod template: service accounts exist, volume
// mounts name volumes, every container has requests and a memory limit.
func checkPods(t *testing.T, objs []object) {
	sas := map[string]bool{}
	for _, o := range objs {
		if o.kind == "ServiceAccount" {
			sas[o.name] = true
		}
	}
	for _, o := range objs {
		var spec *corev1.PodSpec
		switch w := o.obj.(type) {
		case *appsv1.Deployment:
			spec = &w.Spec.Template.Spec
		case *appsv1.DaemonSet:
			spec = &w.Spec.Template.Spec
		case *appsv1.StatefulSet:
			spec = &w.Spec.Template.Spec
			for _, pvc := range w.Spec.VolumeClaimTemplates {
				spec.Volumes = append(spec.Volumes, corev1.Volume{Name: pvc.Name})
			}
		default:
			continue
		}
		if !sas[spec.ServiceAccountName] {
			t.Errorf("%s %s: service account %q not rendered", o.kind, o.name, spec.ServiceAccountName)
		}
		for _, c := range spec.Containers {
			for _, m := range c.VolumeMounts {
				if volume(spec, m.Name) == nil {
					t.Errorf("%s %s container %s mounts unknown volume %q", o.kind, o.name, c.Name, m.Name)
				}
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s %s container %s resources %v", o.kind, o.name, c.Name, c.Resources)
			}
			if c.Image == "" || strings.HasSuffix(c.Image, ":") || strings.HasSuffix(c.Image, ":latest") {
				t.Errorf("%s %s container %s image %q not pinned", o.kind, o.name, c.Name, c.Image)
			}
		}
	}
}

// checkMounter checks the mounters' DaemonSet: the driver's image, its own
// pod (so that the node plugin's pod can go without ending the mounts),
// the socket the node plugin dials in the host state directory both mount,
// IPC_LOCK, no mount rights, rolling updates that hand the mounts over.
func checkMounter(t *testing.T, objs []object, drv *corev1.Container) {
	t.Helper()
	ds := find[*appsv1.DaemonSet](t, objs, "DaemonSet", mounterNm)
	spec := &ds.Spec.Template.Spec
	if got, want := containerNames(spec), []string{"mounter"}; !reflect.DeepEqual(got, want) {
		t.Errorf("mounter containers %v, want %v", got, want)
	}
	m := container(t, spec, "mounter")
	if want := []string{"mounter", "--socket=/var/lib/nfsrdma/mounter.sock", "--state-dir=/var/lib/nfsrdma", "--v=2", "--takeover"}; !reflect.DeepEqual(m.Args, want) {
		t.Errorf("mounter args %v, want %v", m.Args, want)
	}
	if m.Image != drv.Image {
		t.Errorf("mounter image %q, driver image %q", m.Image, drv.Image)
	}
	if sc := m.SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Add, "IPC_LOCK") {
		t.Error("mounter lacks IPC_LOCK (pinning RDMA memory past RLIMIT_MEMLOCK)")
	} else if sc.Privileged == nil || !*sc.Privileged {
		t.Error("mounter not privileged with rdmaDevices=privileged (no /dev/infiniband)")
	}
	if mm := mountAt(m, "/var/lib/nfsrdma"); mm == nil {
		t.Error("mounter does not mount the state directory holding its socket")
	} else if v := volume(spec, mm.Name); v == nil || v.HostPath == nil || v.HostPath.Path != "/var/lib/nfsrdma" {
		t.Errorf("mounter state volume %+v, want hostPath /var/lib/nfsrdma (the node plugin's)", v)
	}
	if mountAt(m, "/var/lib/kubelet/pods") != nil {
		t.Error("mounter mounts the pods directory: it needs no mount rights")
	}
	if !spec.HostNetwork || spec.PriorityClassName != "system-node-critical" || len(spec.Tolerations) == 0 {
		t.Errorf("mounter hostNetwork %v priorityClassName %q tolerations %v", spec.HostNetwork, spec.PriorityClassName, spec.Tolerations)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("mounter pods get an API token they do not use")
	}
	// a rolling update hands the mounts over: the new pod beside the old
	// one, ready once it took them over
	if u := ds.Spec.UpdateStrategy; u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil ||
		u.RollingUpdate.MaxSurge == nil || u.RollingUpdate.MaxSurge.IntValue() != 1 ||
		u.RollingUpdate.MaxUnavailable == nil || u.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("mounter updateStrategy %+v, want RollingUpdate with maxSurge 1, maxUnavailable 0", u)
	}
	if !slices.Contains(m.Args, "--takeover") || m.ReadinessProbe == nil || m.ReadinessProbe.Exec == nil {
		t.Errorf("mounter args %v, readiness %+v: a rolling update needs --takeover and the probe", m.Args, m.ReadinessProbe)
	}
}

func TestChartVariants(t *testing.T) {
	t.Run("ExternalServer", func(t *testing.T) {
		objs := renderObjects(t, "server.enabled=false", "storageClass.parameters.server=nfs.example.com",
			"storageClass.parameters.share=/srv/k8s", "storageClass.parameters.subDir=${pvc.metadata.namespace}/${pvc.metadata.name}")
		for _, k := range []string{"StatefulSet", "Service", "NetworkPolicy"} {
			if n := count(objs, k); n != 0 {
				t.Errorf("%d %s without the server", n, k)
			}
		}
		sc := find[*storagev1.StorageClass](t, objs, "StorageClass", "nfsrdma")
		if sc.Parameters["server"] != "nfs.example.com" || sc.Parameters["subDir"] != "${pvc.metadata.namespace}/${pvc.metadata.name}" {
			t.Errorf("parameters %v", sc.Parameters)
		}
	})
	t.Run("BuiltinRegistration", func(t *testing.T) { checkBuiltinRegistration(t) })
	t.Run("NodeCIDRs", func(t *testing.T) {
		objs := renderObjects(t, "server.networkPolicy.nodeCIDRs={10.0.0.0/24,fd00::/64}", "server.rootExport.clients={10.9.9.9}")
		np := find[*networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", serverNm)
		from, ok := nfsPortSources(t, np)
		var cidrs []string
		for _, p := range from {
			if p.IPBlock == nil || p.PodSelector != nil || p.NamespaceSelector != nil || len(p.IPBlock.Except) != 0 {
				t.Errorf("NFS source %+v: want an ipBlock", p)
				continue
			}
			cidrs = append(cidrs, p.IPBlock.CIDR)
		}
		if !ok || !slices.Equal(cidrs, []string{"10.0.0.0/24", "fd00::/64", "10.9.9.9/32"}) {
			t.Errorf("NFS ports admit %v (rule %v), want the node CIDRs and the root export's client", cidrs, ok)
		}
		// the root export: its own list, read-only and squashed by default
		ss := find[*appsv1.StatefulSet](t, objs, "StatefulSet", serverNm)
		if c := ss.Spec.Template.Spec.Containers[0]; !slices.Contains(c.Args, "--export=/:10.9.9.9:ro,root_squash") {
			t.Errorf("server args %v: no root export to 10.9.9.9", c.Args)
		}
		// the metrics port stays open to every source
		open := false
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				open = open || (p.Port != nil && p.Port.String() == "metrics" && len(rule.From) == 0)
			}
		}
		if !open {
			t.Error("metrics port not open")
		}
	})
	t.Run("ServerTLS", func(t *testing.T) {
		objs := renderObjects(t, "server.tls.secretName=nfs-server-tls", "server.tls.mode=required", "server.ports.rdma=0")
		ss := find[*appsv1.StatefulSet](t, objs, "StatefulSet", serverNm)
		c := ss.Spec.Template.Spec.Containers[0]
		if !hasAll(c.Args, "--tls-cert=/etc/nfsrdma/tls/tls.crt", "--tls-key=/etc/nfsrdma/tls/tls.key",
			"--tls-client-ca=/etc/nfsrdma/tls/ca.crt", "--tls=required", "--rdma-port=0") {
			t.Errorf("server args %v", c.Args)
		}
		if m := mountAt(&c, "/etc/nfsrdma/tls"); m == nil || m.SubPath != "" || !m.ReadOnly {
			t.Errorf("TLS Secret mount %+v", m)
		} else if v := volume(&ss.Spec.Template.Spec, m.Name); v == nil || v.Secret == nil || v.Secret.SecretName != "nfs-server-tls" {
			t.Errorf("TLS volume %+v", v)
		}
		// default: no TLS flags
		def := find[*appsv1.StatefulSet](t, renderObjects(t), "StatefulSet", serverNm)
		for _, a := range def.Spec.Template.Spec.Containers[0].Args {
			if strings.HasPrefix(a, "--tls") {
				t.Errorf("default server args carry %s", a)
			}
		}
	})
	t.Run("NodeCertificates", func(t *testing.T) {
		objs := renderObjects(t, "nodeCertificates.enabled=true", "server.tls.secretName=nfs-server-tls",
			"nodeCertificates.validity=12h", "nodeCertificates.revoked.serials={0A:bc}", "nodeCertificates.revoked.names={node-7}")
		caSecret := releaseName + "-node-ca"
		node := find[*appsv1.DaemonSet](t, objs, "DaemonSet", nodeNm).Spec.Template.Spec.Containers[0]
		if !hasAll(node.Args, "--node-cert=/var/lib/nfsrdma/tls/node.pem") {
			t.Errorf("node args %v", node.Args)
		}
		mspec := find[*appsv1.DaemonSet](t, objs, "DaemonSet", mounterNm).Spec.Template.Spec
		mounter := mspec.Containers[0]
		if !hasAll(mounter.Args, "--tls-cert=/var/lib/nfsrdma/tls/node.pem", "--tls-key=/var/lib/nfsrdma/tls/node.pem",
			"--tls-ca=/etc/nfsrdma/server-ca/ca.crt") {
			t.Errorf("mounter args %v", mounter.Args)
		}
		if m := mountAt(&mounter, "/etc/nfsrdma/server-ca"); m == nil {
			t.Error("mounter: no server CA mount")
		} else if v := volume(&mspec, m.Name); v == nil || v.Secret == nil || v.Secret.SecretName != "nfs-server-tls" ||
			len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "ca.crt" {
			t.Errorf("mounter: server CA volume %+v (only ca.crt of the server's Secret)", v)
		}
		ctrl := find[*appsv1.Deployment](t, objs, "Deployment", controllerNm).Spec.Template.Spec.Containers[0]
		if !hasAll(ctrl.Args, "--node-ca-secret="+caSecret, "--node-service-account=nfsrdma-csi-node", "--node-cert-validity=12h") {
			t.Errorf("controller args %v", ctrl.Args)
		}
		ss := find[*appsv1.StatefulSet](t, objs, "StatefulSet", serverNm)
		srv := ss.Spec.Template.Spec.Containers[0]
		if !hasAll(srv.Args, "--tls-client-ca=/etc/nfsrdma/node-ca/tls.crt", "--tls-revoked=/etc/nfsrdma/revoked/revoked") {
			t.Errorf("server args %v", srv.Args)
		}
		if v := volume(&ss.Spec.Template.Spec, "node-ca"); v == nil || v.Secret == nil || v.Secret.SecretName != caSecret ||
			len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "tls.crt" {
			t.Errorf("server: node CA volume %+v (the CA certificate only, never its key)", v)
		}
		cm := find[*corev1.ConfigMap](t, objs, "ConfigMap", releaseName+"-node-revocations")
		if r := cm.Data["revoked"]; !strings.Contains(r, "\nserial 0abc\n") || !strings.Contains(r, "\nname node-7\n") {
			t.Errorf("revocation list %q", r)
		}
		// RBAC: the controller approves and signs this signer's CSRs only;
		// the node creates and watches CSRs
		cr := find[*rbacv1.ClusterRole](t, objs, "ClusterRole", controllerNm)
		var signer, approval bool
		for _, r := range cr.Rules {
			if slices.Contains(r.Resources, "signers") {
				signer = slices.Equal(r.ResourceNames, []string{"nfsrdma.csi.dev/node"}) && hasAll(r.Verbs, "approve", "sign")
			}
			if slices.Contains(r.Resources, "certificatesigningrequests/approval") {
				approval = slices.Contains(r.Resources, "certificatesigningrequests/status") && hasAll(r.Verbs, "update")
			}
		}
		if !signer || !approval {
			t.Errorf("controller ClusterRole rules %+v", cr.Rules)
		}
		ncr := find[*rbacv1.ClusterRole](t, objs, "ClusterRole", nodeNm)
		if len(ncr.Rules) != 1 || !hasAll(ncr.Rules[0].Verbs, "create", "get", "list", "watch") ||
			!slices.Equal(ncr.Rules[0].Resources, []string{"certificatesigningrequests"}) {
			t.Errorf("node ClusterRole rules %+v", ncr.Rules)
		}
		// default: none of it
		def := renderObjects(t)
		for _, o := range def {
			if o.name == releaseName+"-node-revocations" || (o.kind == "ClusterRole" && o.name == nodeNm) {
				t.Errorf("default chart renders %s %s", o.kind, o.name)
			}
		}
	})
	t.Run("RootExportEveryone", func(t *testing.T) {
		objs := renderObjects(t, "server.rootExport.clients={*}", "server.rootExport.rootSquash=false", "server.rootExport.readOnly=false")
		np := find[*networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", serverNm)
		if from, ok := nfsPortSources(t, np); !ok || from != nil {
			t.Errorf("root export to every client: NFS ports admit %v (rule %v), want every source", from, ok)
		}
		ss := find[*appsv1.StatefulSet](t, objs, "StatefulSet", serverNm)
		if c := ss.Spec.Template.Spec.Containers[0]; !slices.Contains(c.Args, "--export=/:*:rw,no_root_squash") {
			t.Errorf("server args %v", c.Args)
		}
	})
	t.Run("ServerHostNetwork", func(t *testing.T) {
		objs := renderObjects(t, "server.hostNetwork=true")
		ss := find[*appsv1.StatefulSet](t, objs, "StatefulSet", serverNm)
		svc := find[*corev1.Service](t, objs, "Service", serverNm)
		if !ss.Spec.Template.Spec.HostNetwork || svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("hostNetwork %v, service clusterIP %q", ss.Spec.Template.Spec.HostNetwork, svc.Spec.ClusterIP)
		}
		// the callbacks for the node's mounts that reach it are relayed
		// to the mounter's lock callback socket, mounted read-only
		c := ss.Spec.Template.Spec.Containers[0]
		if !slices.Contains(c.Args, "--node-lock-socket=/var/lib/nfsrdma/lockd.sock") {
			t.Errorf("server args %v: no --node-lock-socket", c.Args)
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || (m.MountPath == "/var/lib/nfsrdma" && m.ReadOnly)
		}
		if !mounted {
			t.Errorf("server volume mounts %v: no read-only /var/lib/nfsrdma", c.VolumeMounts)
		}
	})
	t.Run("Errors", func(t *testing.T) {
		for _, sets := range [][]string{
			{"server.enabled=false"}, // a StorageClass without a server
			{"storageClass.parameters.onDelete=shred"},
			{"storageClass.parameters.transport=udp"},
			{"node.mounter.rdmaDevices=hostpath"},
			{"node.mounter.updateStrategy=Recreate"},
			{"node.registration.mode=kubelet"},
			{"controller.livenessProbe.mode=exec"},
			{"server.tls.secretName=s", "server.tls.mode=required"}, // NFS over RDMA still on
			{"server.tls.secretName=s", "server.tls.mode=always"},
			{"nodeCertificates.enabled=true"}, // the server offers no TLS
		} {
			if _, err := runHelm(t, templateArgs(sets...)...); err == nil {
				t.Errorf("helm template with %v: no error", sets)
			}
		}
	})
	t.Run("MounterModes", func(t *testing.T) {
		for _, mode := range []string{"none", "resource"} {
			objs := renderObjects(t, "node.mounter.rdmaDevices="+mode)
			ds := find[*appsv1.DaemonSet](t, objs, "DaemonSet", mounterNm)
			m := container(t, &ds.Spec.Template.Spec, "mounter")
			sc := m.SecurityContext
			if sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: mounter privileged", mode)
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Add, "IPC_LOCK") {
				t.Errorf("%s: mounter lacks IPC_LOCK", mode)
			}
			q := m.Resources.Limits[corev1.ResourceName("rdma/hca_shared_devices_a")]
			if (mode == "resource") != (q.Value() == 1) {
				t.Errorf("%s: mounter limits %v", mode, m.Resources.Limits)
			}
			if m.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s: memory limit lost: %v", mode, m.Resources.Limits)
			}
		}
	})
	t.Run("Optional", func(t *testing.T) {
		objs := renderObjects(t, "volumeSnapshotClass.create=true", "controller.snapshotter.enabled=false",
			"controller.resizer.enabled=false", "controller.replicas=1", "controller.leaderElection.enabled=false",
			"adminToken.value=s3cret", "node.devicePlugin.enabled=false", "imagePullSecrets[0].name=regcred",
			"customLabels.team=storage")
		vsc := find[*VolumeSnapshotClass](t, objs, "VolumeSnapshotClass", "nfsrdma-snapclass")
		if vsc.Driver != driverName || vsc.DeletionPolicy != "Delete" {
			t.Errorf("VolumeSnapshotClass %+v", vsc)
		}
		d := find[*appsv1.Deployment](t, objs, "Deployment", controllerNm)
		if got := containerNames(&d.Spec.Template.Spec); !reflect.DeepEqual(got, []string{"driver", "csi-provisioner", "csi-attacher", "liveness-probe"}) {
			t.Errorf("containers %v", got)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if slices.Contains(c.Args, "--leader-election") {
				t.Errorf("%s: leader election still on", c.Name)
			}
		}
		if len(d.Spec.Template.Spec.ImagePullSecrets) != 1 || d.Labels["team"] != "storage" {
			t.Errorf("imagePullSecrets %v labels %v", d.Spec.Template.Spec.ImagePullSecrets, d.Labels)
		}
		if n := count(objs, "PodDisruptionBudget"); n != 0 {
			t.Errorf("%d PDBs for one replica", n)
		}
		cr := find[*rbacv1.ClusterRole](t, objs, "ClusterRole", controllerNm)
		for _, r := range cr.Rules {
			if slices.Contains(r.Resources, "volumesnapshotcontents/status") || slices.Contains(r.Resources, "persistentvolumeclaims/status") {
				t.Errorf("rule %v without the sidecar that needs it", r)
			}
		}
		role := find[*rbacv1.Role](t, objs, "Role", controllerNm)
		for _, r := range role.Rules {
			if slices.Contains(r.Resources, "leases") {
				t.Errorf("lease rule %v without leader election", r)
			}
		}
		s := find[*corev1.Secret](t, objs, "Secret", "nfsrdma-csi-admin")
		if string(s.Data["token"]) != "s3cret" {
			t.Errorf("admin token %q", s.Data["token"])
		}
		ds := find[*appsv1.DaemonSet](t, objs, "DaemonSet", nodeNm)
		if drv := container(t, &ds.Spec.Template.Spec, "driver"); !slices.Contains(drv.Args, "--device-plugin=false") {
			t.Errorf("node args %v", drv.Args)
		}
	})
}

// manifestsFile is deploy/manifests' single file: the chart rendered with
// the default values except adminToken.create=false (a generated token
// would differ on every render, and a fixed one in a public file is no
// secret).
const manifestsFile = "manifests/nfsrdma-csi.yaml"

var manifestsSets = []string{"adminToken.create=false"}

func manifestsHeader() string {
	return fmt.Sprintf(`# Generated by hack/update-manifests from deploy/helm/nfsrdma-csi (helm %s,
# release %s, namespace %s, --kube-version %s, default values and
# %s). Do not edit; change the chart and run hack/update-manifests.
#
# Before applying, create the admin token Secret shared by the controller
# and the export server:
#   kubectl -n %s create secret generic nfsrdma-csi-admin \
#     --from-literal=token="$(head -c 36 /dev/urandom | base64)"
#   kubectl apply -f %s
`, helmVersion, releaseName, namespace, kubeVersion, strings.Join(manifestsSets, ","), namespace, "deploy/"+manifestsFile)
}

// TestManifestsUpToDate checks that deploy/manifests is the chart rendered
// as manifestsHeader says; with UPDATE_MANIFESTS=1 (hack/update-manifests)
// it writes the file instead.
func TestManifestsUpToDate(t *testing.T) {
	want := manifestsHeader() + string(render(t, manifestsSets...))
	if _, err := decodeAll([]byte(want)); err != nil {
		t.Fatalf("strict decoding of the manifests: %v", err)
	}
	if os.Getenv("UPDATE_MANIFESTS") == "1" {
		if err := os.MkdirAll(filepath.Dir(manifestsFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(manifestsFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote deploy/%s", manifestsFile)
		return
	}
	got, err := os.ReadFile(manifestsFile)
	if err != nil {
		t.Fatalf("%v (run hack/update-manifests)", err)
	}
	if string(got) != want {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("deploy/%s is out of date with the chart (run hack/update-manifests); first difference at line %d:\n have: %q\n want: %q",
					manifestsFile, i+1, g, w)
			}
		}
	}
	// The manifests hold no Secret: the token is the user's.
	if strings.Contains(want, "kind: Secret") {
		t.Error("manifests contain a Secret")
	}
}

// TestStrictDecoding checks that the decoder the chart tests rely on
// rejects what the API server would drop or refuse.
func TestStrictDecoding(t *testing.T) {
	good := "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\nautomountServiceAccountToken: false\n"
	if objs, err := decodeAll([]byte("# comment\n---\n" + good + "---\n")); err != nil || len(objs) != 1 {
		t.Fatalf("decodeAll(good) = %v, %v", objs, err)
	}
	for name, doc := range map[string]string{
		"unknown field":   good + "automountToken: true\n",
		"duplicate field": good + "automountServiceAccountToken: true\n",
		"wrong type":      "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: [a]\n",
		"unknown kind":    "apiVersion: v1\nkind: Gadget\nmetadata:\n  name: a\n",
		"misplaced field": "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: a\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n        mountPropagation: Bidirectional\n",
		"snapshot class":  "apiVersion: snapshot.storage.k8s.io/v1\nkind: VolumeSnapshotClass\nmetadata:\n  name: a\ndriver: d\ndeletionPolicy: Delete\nparameterz: {}\n",
	} {
		if _, err := decodeAll([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error:\n%s", name, doc)
		}
	}
}

// checkBuiltinRegistration renders node.registration.mode=builtin and
// controller.livenessProbe.mode=builtin: no node-driver-registrar or
// livenessprobe container anywhere; the node driver registers itself
// through kubelet's plugins_registry (hostPath, mounted at the directory
// its flag names) with the CSI socket's host path, and serves /healthz on
// the port its liveness probe asks; the controller serves its own
// /healthz likewise. Each mode alone changes only its own workload.
func checkBuiltinRegistration(t *testing.T) {
	objs := renderObjects(t, "node.registration.mode=builtin", "controller.livenessProbe.mode=builtin")
	ds := find[*appsv1.DaemonSet](t, objs, "DaemonSet", nodeNm)
	spec := &ds.Spec.Template.Spec
	if got, want := containerNames(spec), []string{"driver"}; !reflect.DeepEqual(got, want) {
		t.Errorf("node containers %v, want %v", got, want)
	}
	drv := container(t, spec, "driver")
	wantArgs := []string{"node", "--endpoint=unix:///csi/csi.sock", "--nodeid=$(NODE_NAME)", "--node-address=$(NODE_IP)",
		"--mounter-socket=/var/lib/nfsrdma/mounter.sock", "--namespace=" + namespace, "--device-plugin=true",
		"--device-plugin-dir=/var/lib/kubelet/device-plugins", "--resource-name=nfsrdma.csi.dev/hca",
		"--metrics-address=:9811", "--enable-fuse-uring=true", "--register-with-kubelet",
		"--kubelet-registration-path=/var/lib/kubelet/plugins/" + driverName + "/csi.sock",
		"--plugin-registration-dir=/registration", "--health-address=:29753", "--v=2"}
	if !reflect.DeepEqual(drv.Args, wantArgs) {
		t.Errorf("node driver args\n %v\nwant\n %v", drv.Args, wantArgs)
	}
	// The registration path is the host path of the socket the driver
	// serves at /csi/csi.sock.
	if m := mountAt(drv, "/csi"); m == nil {
		t.Error("node driver has no /csi mount")
	} else if v := volume(spec, m.Name); v == nil || v.HostPath == nil || v.HostPath.Path != "/var/lib/kubelet/plugins/"+driverName {
		t.Errorf("/csi volume %+v is not the registered path's directory", v)
	}
	if m := mountAt(drv, "/registration"); m == nil {
		t.Error("node driver has no /registration mount")
	} else if v := volume(spec, m.Name); v == nil || v.HostPath == nil || v.HostPath.Path != "/var/lib/kubelet/plugins_registry" ||
		v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectory {
		t.Errorf("registration volume %+v, want hostPath /var/lib/kubelet/plugins_registry (Directory)", v)
	}
	checkHealthPort(t, "node", drv, 29753)

	d := find[*appsv1.Deployment](t, objs, "Deployment", controllerNm)
	cspec := &d.Spec.Template.Spec
	if slices.Contains(containerNames(cspec), "liveness-probe") {
		t.Errorf("controller containers %v with a builtin liveness probe", containerNames(cspec))
	}
	cdrv := container(t, cspec, "driver")
	if !slices.Contains(cdrv.Args, "--health-address=:29752") {
		t.Errorf("controller driver args %v lack --health-address=:29752", cdrv.Args)
	}
	checkHealthPort(t, "controller", cdrv, 29752)
	checkPods(t, objs)

	// One mode without the other.
	objs = renderObjects(t, "node.registration.mode=builtin")
	d = find[*appsv1.Deployment](t, objs, "Deployment", controllerNm)
	if !slices.Contains(containerNames(&d.Spec.Template.Spec), "liveness-probe") {
		t.Error("node.registration.mode=builtin removed the controller's livenessprobe")
	}
	objs = renderObjects(t, "controller.livenessProbe.mode=builtin")
	ds = find[*appsv1.DaemonSet](t, objs, "DaemonSet", nodeNm)
	if got := containerNames(&ds.Spec.Template.Spec); !reflect.DeepEqual(got, []string{"driver", "node-driver-registrar", "liveness-probe"}) {
		t.Errorf("controller.livenessProbe.mode=builtin changed the node containers: %v", got)
	}
}

// checkHealthPort checks that c's liveness probe GETs /healthz on the
// named port that c declares as port.
func checkHealthPort(t *testing.T, what string, c *corev1.Container, port int32) {
	t.Helper()
	p := c.LivenessProbe
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Fatalf("%s liveness probe %+v", what, p)
	}
	for _, cp := range c.Ports {
		if cp.Name == p.HTTPGet.Port.StrVal && cp.ContainerPort == port {
			return
		}
	}
	t.Errorf("%s: liveness probe port %v is not container port %d (%v)", what, p.HTTPGet.Port, port, c.Ports)
}
