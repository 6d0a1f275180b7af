//go:build node

package node

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const (
	release   = "nfsrdma-csi"
	ns        = "nfsrdma"         // the chart's namespace
	apps      = "demo"            // the workloads' namespace
	driver    = "nfsrdma.csi.dev" // the chart's driver.name
	resource  = "nfsrdma.csi.dev/hca"
	ledger    = "nfsrdma-credits"
	busybox   = "localhost/busybox:1.35.0"
	locktest  = "localhost/fcntllock:dev" // busybox, fcntllock and fsyncwriter (hack/cluster images)
	blobMiB   = 256
	chartPath = "deploy/helm/nfsrdma-csi"
)

// pod is a busybox pod with the claim mounted at /data.
func pod(name, claim string) string { return podOn(name, claim, "", busybox) }

// podOn is a pod of image with the claim mounted at /data, on node (any node
// when empty).
func podOn(name, claim, node, image string) string {
	sel := ""
	if node != "" {
		sel = "\n  nodeSelector:\n    kubernetes.io/hostname: " + node
	}
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
spec:
  terminationGracePeriodSeconds: 5%s
  containers:
    - name: app
      image: %s
      imagePullPolicy: Never
      command: ["sleep", "36000"]
      volumeMounts:
        - name: data
          mountPath: /data
  volumes:
    - name: data
      persistentVolumeClaim:
        claimName: %s
`, name, apps, sel, image, claim)
}

func pvc(name, class, size, mode, extra string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: %s
  namespace: %s
spec:
  storageClassName: %s
  accessModes: [%s]
  resources:
    requests:
      storage: %s
%s`, name, apps, class, mode, size, extra)
}

func TestNode(t *testing.T) {
	c := newCluster(t)
	if err := os.Chdir(c.repo); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.cleanup(t) })

	failed := ""
	step := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			if failed != "" {
				t.Skipf("skipped: step %q failed", failed)
			}
			fmt.Printf("\n### %s\n", name)
			f(t)
		})
		if t.Failed() && failed == "" {
			failed = name
		}
	}
	// Steps that do not need the ones before run anyway.
	independent := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) { fmt.Printf("\n### %s\n", name); f(t) })
	}

	step("1-install", c.install)
	step("2-rwx-two-pods", c.rwx)
	independent("2b-lock-across-nodes", c.lockAcrossNodes)
	independent("2c-unpublished-node-refused", c.unpublishedRefused)
	independent("2d-attacker-pod", c.attacker)
	step("3-node-plugin-restart", c.pluginRestart)
	step("3b-upgrade-under-io", c.upgradeUnderIO)
	step("4-expand", c.expand)
	step("5-snapshot-restore", c.snapshot)
	step("6-credits-wait", c.creditsWait)
	independent("8-bad-input", c.badInput)
	independent("6b-mounter-killed", c.mounterKilled)
	step("7-cleanup", c.teardownSteps)
	independent("9-node-certificates", c.nodeCertificates)
}

// 1. helm install: every pod Ready, CSINode lists the driver, the node
// lists the device plugin's resource.
func (c *cluster) install(t *testing.T) {
	sh(t, "kubectl get nodes -o wide")
	sh(t, "cat "+c.values)
	sh(t, "helm install "+release+" "+chartPath+" --namespace "+ns+" --create-namespace -f "+c.values+" --wait --timeout 5m")
	sh(t, "kubectl -n "+ns+" wait --for=condition=Ready pod --all --timeout=120s")
	sh(t, "kubectl -n "+ns+" get pods -o wide")
	for _, n := range c.allNodes() {
		waitOut(t, time.Minute, "CSINode "+n+" lists "+driver, "kubectl get csinode "+n+" -o jsonpath='{.spec.drivers[*].name}'",
			func(o string) bool { return strings.Contains(o, driver) })
		// the device plugin's resource: as many as the node has kernel RDMA
		// devices (none here: the software iWARP stack needs no device)
		waitOut(t, time.Minute, "node "+n+" capacity lists "+resource, "kubectl get node "+n+" -o jsonpath='{.status.capacity}'",
			func(o string) bool { return strings.Contains(o, resource) })
	}
	sh(t, "kubectl get csinode "+c.workers()[0]+" -o yaml")
	sh(t, "kubectl get node "+c.workers()[0]+" -o jsonpath='{.status.capacity}' | tr , '\\n'")
	sh(t, "kubectl get storageclass")
}

// 2. A ReadWriteMany claim in two pods, on two different nodes when the cluster has
// them: one writes, the other verifies; each pod has its own FUSE mount and RDMA
// connection on its node; the export server sees connections from both nodes'
// addresses; the ledger shows both grants.
func (c *cluster) rwx(t *testing.T) {
	sh(t, "kubectl create namespace "+apps)
	apply(t, pvc("shared", "nfsrdma", "1Gi", "ReadWriteMany", ""))
	waitOut(t, 2*time.Minute, "PVC shared Bound", "kubectl -n "+apps+" get pvc shared -o jsonpath='{.status.phase}'",
		func(o string) bool { return o == "Bound" })
	sh(t, "kubectl -n "+apps+" get pvc shared")
	w := c.workers()
	apply(t, podOn("writer", "shared", w[0], busybox))
	apply(t, podOn("reader", "shared", w[len(w)-1], busybox))
	sh(t, "kubectl -n "+apps+" wait --for=condition=Ready pod/writer pod/reader --timeout=180s")
	sh(t, "kubectl -n "+apps+" get pods -o wide")
	sh(t, fmt.Sprintf("kubectl -n %s exec writer -- sh -c 'dd if=/dev/urandom of=/data/blob bs=1M count=%d && sha256sum /data/blob > /data/blob.sha256 && cat /data/blob.sha256'", apps, blobMiB))
	sh(t, "kubectl -n "+apps+" exec reader -- sh -c 'ls -l /data && sha256sum -c /data/blob.sha256'")
	sh(t, "kubectl -n "+apps+" exec reader -- df -h /data")

	// on each pod's node: one FUSE mount for the pod, and its RDMA connection
	uids := c.uids(t, "writer", "reader")
	conns := 0
	for p, uid := range uids {
		node := c.podNode(t, p)
		sh(t, c.onNode(node, "grep fuse /proc/self/mountinfo | grep /var/lib/kubelet/pods/ | cut -d' ' -f5,9-"))
		n := 0
		ms := c.nodeMounts(t, node)
		for _, m := range ms {
			if strings.Contains(m, "/pods/"+uid+"/") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("pod %s (uid %s): %d FUSE mounts on node %s, want 1 (%v)", p, uid, n, node, ms)
		}
		if out := strings.TrimSpace(sh(t, c.onNode(node, "ss -Htn state established '( dport = :20049 )'"))); out != "" {
			conns += len(strings.Split(out, "\n"))
		}
	}
	if conns < 2 {
		t.Errorf("%d RPC-over-RDMA connections (port 20049) on the pods' nodes, want one per pod (2)", conns)
	}
	if c.multiNode() {
		c.serverSeesNodes(t, c.podNode(t, "writer"), c.podNode(t, "reader"))
	}
	c.ledgerHas(t, map[string]bool{"writer": true, "reader": true})
}

// uids returns the UIDs of the named pods of the apps namespace.
func (c *cluster) uids(t *testing.T, pods ...string) map[string]string {
	t.Helper()
	uids := map[string]string{}
	for _, p := range pods {
		uids[p] = strings.TrimSpace(sh(t, "kubectl -n "+apps+" get pod "+p+" -o jsonpath='{.metadata.uid}'"))
	}
	return uids
}

// ledgerHas waits until the credit ledger grants (true) or refuses (false)
// each named pod of the apps namespace credits.
func (c *cluster) ledgerHas(t *testing.T, want map[string]bool) {
	t.Helper()
	waitOut(t, 2*time.Minute, fmt.Sprintf("credit ledger %v", want), "kubectl -n "+ns+" get configmap "+ledger+" -o json",
		func(o string) bool {
			var cm struct{ Data map[string]string }
			if json.Unmarshal([]byte(o), &cm) != nil {
				return false
			}
			for p, granted := range want {
				v, ok := cm.Data[apps+"."+p]
				if !ok {
					return false
				}
				var e struct{ Granted int }
				if json.Unmarshal([]byte(v), &e) != nil || (e.Granted > 0) != granted {
					return false
				}
			}
			return true
		})
	sh(t, "kubectl -n "+ns+" get configmap "+ledger+" -o yaml")
}

// 3. The node plugin's pod on the writer's node is deleted while the pod writes: the
// write goes on without error, the data verifies, the new node plugin adopts the mounts.
func (c *cluster) pluginRestart(t *testing.T) {
	node := c.podNode(t, "writer")
	plugin := "kubectl -n " + ns + " get pods -l app.kubernetes.io/component=node --field-selector spec.nodeName=" + node + " -o jsonpath='{.items[*].metadata.name}'"
	old := strings.TrimSpace(sh(t, plugin))
	cmd := fmt.Sprintf("kubectl -n %s exec writer -- sh -c 'dd if=/dev/urandom of=/data/during bs=1M count=%d && sha256sum /data/during > /data/during.sha256 && cat /data/during.sha256'", apps, 2*blobMiB)
	fmt.Printf("$ %s &\n", cmd)
	w := exec.Command("bash", "-c", cmd)
	wout := &strings.Builder{}
	w.Stdout, w.Stderr = wout, wout
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Wait() }()
	time.Sleep(2 * time.Second)
	sh(t, "kubectl -n "+ns+" delete pod "+old+" --wait=true --timeout=90s")
	select {
	case err := <-done:
		done <- err
		t.Errorf("the writer ended before the node plugin's pod was gone: nothing was written across the restart")
	default:
		fmt.Println("(the writer is still writing)")
	}
	sh(t, "kubectl -n "+ns+" rollout status daemonset/"+release+"-node --timeout=120s")
	sh(t, "kubectl -n "+ns+" get pods -l app.kubernetes.io/component=node -o wide")
	select {
	case err := <-done:
		fmt.Printf("(writer) %s", wout.String())
		if err != nil {
			t.Fatalf("the writer failed while the node plugin restarted: %v", err)
		}
	case <-time.After(4 * time.Minute):
		_ = w.Process.Kill()
		t.Fatalf("the writer did not finish within 4 min of the node plugin's restart; output: %s", wout.String())
	}
	sh(t, "kubectl -n "+apps+" exec reader -- sh -c 'sha256sum -c /data/during.sha256 /data/blob.sha256'")
	nw := strings.TrimSpace(sh(t, plugin))
	if nw == old {
		t.Fatalf("node plugin pod %s was not replaced", old)
	}
	// the mounts live on in the mounter's pod; the new node plugin finds them there
	sh(t, "kubectl -n "+ns+" get pods -l app.kubernetes.io/component=mounter -o wide")
	logs := sh(t, "kubectl -n "+ns+" logs "+nw+" | grep 'mount still served' || true")
	for p, uid := range c.uids(t, "writer", "reader") {
		if c.podNode(t, p) != node {
			continue
		}
		if !strings.Contains(logs, "/pods/"+uid+"/") {
			t.Errorf("the new node plugin pod %s does not report pod %s's mount (uid %s) as still served", nw, p, uid)
		}
	}
	// the adopted mounts keep working and can be released: a new write
	sh(t, "kubectl -n "+apps+" exec writer -- sh -c 'echo after-restart > /data/after && cat /data/after'")
}

// 4. kubectl patch pvc to a larger size: df in the running pod shows it.
func (c *cluster) expand(t *testing.T) {
	sh(t, "kubectl -n "+apps+" exec reader -- df -h /data")
	sh(t, `kubectl -n `+apps+` patch pvc shared -p '{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}'`)
	waitOut(t, 3*time.Minute, "PVC shared capacity 2Gi", "kubectl -n "+apps+" get pvc shared -o jsonpath='{.status.capacity.storage}'",
		func(o string) bool { return o == "2Gi" })
	sh(t, "kubectl -n "+apps+" get pvc shared")
	waitOut(t, 2*time.Minute, "df in the pod shows 2 GiB", "kubectl -n "+apps+" exec reader -- df -kP /data | tail -1",
		func(o string) bool {
			f := strings.Fields(o)
			var kb int64
			if len(f) > 1 {
				fmt.Sscan(f[1], &kb)
			}
			return kb >= 2*1024*1024-1024 && kb <= 2*1024*1024+1024
		})
	sh(t, "kubectl -n "+apps+" exec reader -- df -h /data")
}

// 5. A VolumeSnapshot and a claim restored from it: a pod reads the same SHA-256.
func (c *cluster) snapshot(t *testing.T) {
	apply(t, `
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotClass
metadata:
  name: nfsrdma-snapclass
driver: `+driver+`
deletionPolicy: Delete
---
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata:
  name: shared-snap
  namespace: `+apps+`
spec:
  volumeSnapshotClassName: nfsrdma-snapclass
  source:
    persistentVolumeClaimName: shared
`)
	waitOut(t, 3*time.Minute, "VolumeSnapshot ready", "kubectl -n "+apps+" get volumesnapshot shared-snap -o jsonpath='{.status.readyToUse}'",
		func(o string) bool { return o == "true" })
	sh(t, "kubectl -n "+apps+" get volumesnapshot")
	apply(t, pvc("restored", "nfsrdma", "2Gi", "ReadWriteOnce", `  dataSource:
    apiGroup: snapshot.storage.k8s.io
    kind: VolumeSnapshot
    name: shared-snap
`))
	apply(t, pod("restored", "restored"))
	sh(t, "kubectl -n "+apps+" wait --for=condition=Ready pod/restored --timeout=180s")
	sh(t, "kubectl -n "+apps+" get pvc")
	sh(t, "kubectl -n "+apps+" exec restored -- sh -c 'ls -l /data && sha256sum -c /data/blob.sha256'")
}

// 6. A pod whose credits cannot be granted waits with an event and starts
// once another pod is deleted.
func (c *cluster) creditsWait(t *testing.T) {
	// three pods use the server; a budget of three credits leaves none for a fourth
	defer try(t, "helm upgrade "+release+" "+chartPath+" --namespace "+ns+" --reuse-values --set server.creditsBudget=512 --wait --timeout 5m")
	sh(t, "helm upgrade "+release+" "+chartPath+" --namespace "+ns+" --reuse-values --set server.creditsBudget=3 --wait --timeout 5m")
	sh(t, "kubectl -n "+ns+" rollout status deployment/"+release+"-controller --timeout=180s")
	sh(t, "kubectl -n "+ns+" rollout status statefulset/"+release+"-server --timeout=180s")
	sh(t, "kubectl -n "+ns+" get pods")
	// the running pods' mounts went through the export server's restart
	sh(t, "kubectl -n "+apps+" exec writer -- sh -c 'echo after-server-restart >> /data/after && sha256sum -c /data/blob.sha256'")
	c.ledgerHas(t, map[string]bool{"writer": true, "reader": true, "restored": true})
	// the controllers were replaced: wait until the ledger's leader runs
	// with the new budget (the old one may hold the Lease for a while)
	waitOut(t, 3*time.Minute, "the credit ledger applies the budget of 3", "kubectl -n "+ns+" get configmap nfsrdma-credits -o jsonpath='{.data._servers}'",
		func(o string) bool { return strings.Contains(o, `"budget":3,`) })
	apply(t, pod("extra", "shared"))
	waitOut(t, 3*time.Minute, "an event tells why pod extra waits", "kubectl -n "+apps+" get events --field-selector involvedObject.name=extra -o custom-columns=REASON:.reason,MESSAGE:.message --no-headers",
		func(o string) bool { return strings.Contains(o, "credits") })
	sh(t, "kubectl -n "+apps+" get pod extra")
	if ph := strings.TrimSpace(sh(t, "kubectl -n "+apps+" get pod extra -o jsonpath='{.status.containerStatuses[0].ready}'")); ph == "true" {
		t.Fatalf("pod extra is ready without credits")
	}
	sh(t, "kubectl -n "+apps+" get events --field-selector involvedObject.name=extra")
	sh(t, "kubectl -n "+apps+" delete pod restored --wait=true --timeout=90s")
	sh(t, "kubectl -n "+apps+" wait --for=condition=Ready pod/extra --timeout=300s")
	sh(t, "kubectl -n "+apps+" get pods")
	c.ledgerHas(t, map[string]bool{"writer": true, "reader": true, "extra": true})
	sh(t, "kubectl -n "+apps+" exec extra -- sha256sum -c /data/blob.sha256")
}

// 8. Bad input: an unknown StorageClass parameter leaves the claim Pending
// with an event naming it; a pod mounting a deleted volume fails with a
// clear event.
func (c *cluster) badInput(t *testing.T) {
	if out, _ := quiet("helm status " + release + " -n " + ns); !strings.Contains(out, "deployed") {
		t.Skip("the chart is not installed")
	}
	quiet("kubectl create namespace " + apps)
	apply(t, `
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: nfsrdma-typo
provisioner: `+driver+`
parameters:
  server: `+release+`-server.`+ns+`.svc.cluster.local
  share: /
  creditPerPod: "8"
`)
	apply(t, pvc("typo", "nfsrdma-typo", "1Gi", "ReadWriteOnce", ""))
	waitOut(t, 2*time.Minute, "ProvisioningFailed event naming the parameter", "kubectl -n "+apps+" get events --field-selector involvedObject.name=typo -o custom-columns=REASON:.reason,MESSAGE:.message --no-headers",
		func(o string) bool {
			return strings.Contains(o, "ProvisioningFailed") && strings.Contains(o, "creditPerPod")
		})
	sh(t, "kubectl -n "+apps+" get pvc typo")
	if ph := strings.TrimSpace(sh(t, "kubectl -n "+apps+" get pvc typo -o jsonpath='{.status.phase}'")); ph != "Pending" {
		t.Errorf("PVC typo is %s, want Pending", ph)
	}
	sh(t, "kubectl -n "+apps+" get events --field-selector involvedObject.name=typo")
	sh(t, "kubectl -n "+apps+" delete pvc typo --wait=false && kubectl delete storageclass nfsrdma-typo")

	// a volume whose directory is gone from the export
	apply(t, pvc("gone", "nfsrdma", "1Gi", "ReadWriteOnce", ""))
	waitOut(t, 2*time.Minute, "PVC gone Bound", "kubectl -n "+apps+" get pvc gone -o jsonpath='{.status.phase}'",
		func(o string) bool { return o == "Bound" })
	pv := strings.TrimSpace(sh(t, "kubectl -n "+apps+" get pvc gone -o jsonpath='{.spec.volumeName}'"))
	dir := filepath.Join(c.dir, "pv", "export", "export", pv)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the volume's directory on the export: %v", err)
	}
	sh(t, "rm -rf "+dir+"   # on the export server's disk: the volume is deleted behind Kubernetes' back")
	apply(t, pod("orphan", "gone"))
	waitOut(t, 3*time.Minute, "an event tells the volume is gone", "kubectl -n "+apps+" get events --field-selector involvedObject.name=orphan -o custom-columns=REASON:.reason,MESSAGE:.message --no-headers",
		func(o string) bool {
			return regexp.MustCompile(`(?i)(FailedMount|FailedAttachVolume).*(not found|no such|does not exist|stale)`).MatchString(o)
		})
	sh(t, "kubectl -n "+apps+" get pod orphan")
	sh(t, "kubectl -n "+apps+" get events --field-selector involvedObject.name=orphan")
	sh(t, "kubectl -n "+apps+" delete pod orphan --wait=true --timeout=90s")
	// DeleteVolume of a volume already gone succeeds: the PV goes
	sh(t, "kubectl -n "+apps+" delete pvc gone --wait=true --timeout=60s")
	waitOut(t, 2*time.Minute, "PV "+pv+" deleted", "kubectl get pv "+pv+" -o name --ignore-not-found", func(o string) bool { return strings.TrimSpace(o) == "" })
}

// 7. Deleting the pods leaves no FUSE mount or mount process; deleting the
// claims applies onDelete; helm uninstall leaves nothing running.
func (c *cluster) teardownSteps(t *testing.T) {
	pvs := strings.Fields(sh(t, "kubectl -n "+apps+" get pvc -o jsonpath='{.items[*].spec.volumeName}'"))
	sh(t, "kubectl -n "+apps+" delete pod --all --wait=true --timeout=120s")
	waitFor(t, time.Minute, "no FUSE mount under /var/lib/kubelet/pods on any node", func() (bool, string) {
		m := c.allMounts(t)
		return len(m) == 0, strings.Join(m, ", ")
	})
	waitFor(t, time.Minute, "no mount process on any node", func() (bool, string) {
		p := c.allProcs(isMount)
		return len(p) == 0, strings.Join(p, ", ")
	})
	for _, n := range c.allNodes() {
		sh(t, c.onNode(n, "grep -c fuse /proc/self/mountinfo || true"))
	}
	sh(t, "ls "+filepath.Join(c.dir, "pv", "export", "export"))
	sh(t, "kubectl -n "+apps+" delete volumesnapshot --all --wait=true --timeout=120s")
	sh(t, "kubectl -n "+apps+" delete pvc --all --wait=true --timeout=120s")
	for _, pv := range pvs {
		waitOut(t, 2*time.Minute, "PV "+pv+" deleted", "kubectl get pv "+pv+" -o name --ignore-not-found", func(o string) bool { return strings.TrimSpace(o) == "" })
		dir := filepath.Join(c.dir, "pv", "export", "export", pv)
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("onDelete=delete: %s is still on the export", dir)
		}
	}
	sh(t, "ls "+filepath.Join(c.dir, "pv", "export", "export"))
	sh(t, "helm uninstall "+release+" --namespace "+ns+" --wait --timeout 3m")
	waitOut(t, 2*time.Minute, "no pod left in "+ns, "kubectl -n "+ns+" get pods -o name", func(o string) bool { return strings.TrimSpace(o) == "" })
	waitFor(t, time.Minute, "no driver or sidecar process on any node", func() (bool, string) {
		p := c.allProcs(isDriver)
		return len(p) == 0, strings.Join(p, ", ")
	})
	sh(t, "kubectl get pods -A")
}

// cleanup removes what the test made, whatever step it stopped at.
func (c *cluster) cleanup(t *testing.T) {
	if t.Failed() {
		fmt.Println("\n### state at failure")
		try(t, "kubectl get pods -A -o wide")
		try(t, "kubectl -n "+apps+" get events --sort-by=.lastTimestamp | tail -30")
		try(t, "kubectl -n "+ns+" get events --sort-by=.lastTimestamp | tail -30")
		try(t, "kubectl -n "+ns+" logs -l app.kubernetes.io/component=node --all-containers --tail=40")
		try(t, "kubectl -n "+ns+" logs -l app.kubernetes.io/component=controller -c driver --tail=40")
	}
	quiet("kubectl delete namespace " + apps + " --wait=true --timeout=120s")
	quiet("kubectl delete volumesnapshotclass nfsrdma-snapclass --ignore-not-found")
	quiet("kubectl delete storageclass nfsrdma-typo --ignore-not-found")
	// the export server's claim stays (the chart retains it), bound to the
	// cluster's export volume, as after a user's helm uninstall
	quiet("helm uninstall " + release + " --namespace " + ns + " --wait --timeout 2m")
}
