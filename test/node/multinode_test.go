//go:build node

package node

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serverPod is the export server's pod (the chart's StatefulSet).
const serverPod = release + "-server-0"

// serverMetrics returns the export server's Prometheus metrics, through the
// apiserver's proxy to the pod's metrics port.
func (c *cluster) serverMetrics(t *testing.T) string {
	t.Helper()
	out, err := quiet("kubectl get --raw /api/v1/namespaces/" + ns + "/pods/" + serverPod + ":9812/proxy/metrics")
	if err != nil {
		t.Fatalf("the export server's metrics: %v: %s", err, out)
	}
	return out
}

// nodeIP returns node's InternalIP.
func (c *cluster) nodeIP(t *testing.T, node string) string {
	t.Helper()
	return strings.TrimSpace(sh(t, "kubectl get node "+node+` -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}'`))
}

// serverSeesNodes checks that the export server's metrics list RPC-over-RDMA
// connections from each node's address.
func (c *cluster) serverSeesNodes(t *testing.T, nodes ...string) {
	t.Helper()
	m := c.serverMetrics(t)
	for _, l := range strings.Split(m, "\n") {
		if strings.HasPrefix(l, "nfsrdma_rpcrdma_connection_credits_granted") {
			fmt.Println(l)
		}
	}
	for _, n := range nodes {
		ip := c.nodeIP(t, n)
		if !strings.Contains(m, `peer="`+ip+`:`) {
			t.Errorf("the export server's metrics list no RPC-over-RDMA connection from node %s (%s)", n, ip)
		}
	}
}

// 2b. A pod's fcntl lock on one node blocks a pod on another node until it is
// released; the waiter is granted by the server's callback (NLM GRANTED to the
// waiter's node), not by its once-a-second retry.
func (c *cluster) lockAcrossNodes(t *testing.T) {
	if !c.multiNode() {
		t.Skip("needs two worker nodes (hack/cluster up --nodes 3)")
	}
	w := c.workers()
	apply(t, podOn("holder", "shared", w[0], locktest))
	apply(t, podOn("waiter", "shared", w[len(w)-1], locktest))
	sh(t, "kubectl -n "+apps+" wait --for=condition=Ready pod/holder pod/waiter --timeout=180s")
	sh(t, "kubectl -n "+apps+" get pods -o wide")
	// the holder takes the lock and keeps it until /tmp/release exists in its pod,
	// then prints the time it let go (the machine's uptime, to 10 ms: the nodes share
	// the clock)
	sh(t, "kubectl -n "+apps+" exec holder -- sh -c 'touch /data/lockfile && (setsid sh -c \"fcntllock -hold /tmp/release /data/lockfile w 0 0; cat /proc/uptime\" >/tmp/holder.log 2>&1 &) && sleep 1 && cat /tmp/holder.log'")
	// (an export server that restarted with its state, as after an earlier install on
	// the same export volume, grants new locks only after its grace period: 90 s)
	waitOut(t, 2*time.Minute, "the holder holds the lock", "kubectl -n "+apps+" exec holder -- cat /tmp/holder.log",
		func(o string) bool { return strings.HasPrefix(o, "locked") })
	sh(t, "kubectl -n "+apps+" exec waiter -- fcntllock -test /data/lockfile w 0 0")

	cmd := "kubectl -n " + apps + " exec waiter -- sh -c 'fcntllock -wait /data/lockfile w 0 0 && cat /proc/uptime'"
	fmt.Printf("$ %s &\n", cmd)
	wt := exec.Command("bash", "-c", cmd)
	wout := &strings.Builder{}
	wt.Stdout, wt.Stderr = wout, wout
	if err := wt.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- wt.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("the waiter did not block on the holder's lock: %v: %s", err, wout.String())
	case <-time.After(4500 * time.Millisecond): // between two of the waiter's 1 s re-sends
		fmt.Println("(the waiter is blocked in F_SETLKW)")
	}
	sh(t, "kubectl -n "+apps+" exec holder -- touch /tmp/release")
	select {
	case err := <-done:
		fmt.Printf("(waiter) %s", wout.String())
		if err != nil {
			t.Fatalf("the waiter failed: %v", err)
		}
	case <-time.After(time.Minute):
		_ = wt.Process.Kill()
		t.Fatalf("the waiter was not granted the lock within a minute of the release: %s", wout.String())
	}
	released := uptime(waitOut(t, 30*time.Second, "the holder let go", "kubectl -n "+apps+" exec holder -- cat /tmp/holder.log",
		func(o string) bool { return strings.Contains(o, "released") }))
	granted := uptime(wout.String())
	if released == 0 || granted == 0 {
		t.Fatalf("no times to compare: released %v, granted %v", released, granted)
	}
	delay := granted - released
	fmt.Printf("the waiter on %s was granted the lock %v after the holder on %s let go\n", w[len(w)-1], delay.Round(time.Millisecond), w[0])
	// the waiter's node says how: by the server's GRANTED callback
	node := c.podNode(t, "waiter")
	out := sh(t, c.onNode(node, "grep -h 'granted by' /var/lib/nfsrdma/*.log | tail -5"))
	if !strings.Contains(out, "granted by callback") {
		t.Errorf("the waiter's mount on %s logs no lock granted by callback", node)
	}
	sh(t, "kubectl -n "+apps+" delete pod holder waiter --wait=true --timeout=90s")
}

// uptime returns the time in the last line of s that is /proc/uptime's (seconds
// since boot, then idle time), 0 when none is.
func uptime(s string) time.Duration {
	var v time.Duration
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		if x, err := strconv.ParseFloat(f[0], 64); err == nil {
			v = time.Duration(x * float64(time.Second))
		}
	}
	return v
}

// 2c. A node the volume was not published to cannot mount it: the export server's
// MOUNT refuses the node's address (the volume's access list names only the nodes
// ControllerPublishVolume granted).
func (c *cluster) unpublishedRefused(t *testing.T) {
	if !c.multiNode() {
		t.Skip("needs two worker nodes (hack/cluster up --nodes 3)")
	}
	apply(t, pvc("private", "nfsrdma", "1Gi", "ReadWriteOnce", ""))
	w := c.workers()
	apply(t, podOn("owner", "private", w[0], busybox))
	sh(t, "kubectl -n "+apps+" wait --for=condition=Ready pod/owner --timeout=180s")
	pv := strings.TrimSpace(sh(t, "kubectl -n "+apps+" get pvc private -o jsonpath='{.spec.volumeName}'"))
	sh(t, "kubectl get volumeattachment -o custom-columns=PV:.spec.source.persistentVolumeName,NODE:.spec.nodeName,ATTACHED:.status.attached | grep -E '^(PV|"+pv+")'")
	export := strings.TrimSpace(sh(t, "kubectl get pv "+pv+" -o jsonpath='{.spec.csi.volumeAttributes.export}'"))
	server := strings.TrimSpace(sh(t, "kubectl -n "+ns+" get pod "+serverPod+" -o jsonpath='{.status.podIP}'"))
	other := w[len(w)-1]
	// the driver's own mount command, run on the other node as its mounter would
	drv := c.dir + "/images/driver"
	out, err := try(t, c.onNode(other, "mkdir -p /tmp/unpublished && timeout 60 "+drv+" mount -o proto=rdma,port=20049,mountport=20048,soft,retrans=1 "+server+":"+export+" /tmp/unpublished; rc=$?; umount /tmp/unpublished 2>/dev/null; rmdir /tmp/unpublished; exit $rc"))
	if err == nil {
		t.Fatalf("node %s mounted volume %s, which is published only to %s", other, pv, w[0])
	}
	if !strings.Contains(strings.ToLower(out), "acces") && !strings.Contains(strings.ToLower(out), "permission") {
		t.Errorf("the refusal does not say the server refused access (MNT3ERR_ACCES): %s", out)
	}
	// and the node it is published to still mounts it
	sh(t, "kubectl -n "+apps+" exec owner -- sh -c 'echo mine > /data/owner && cat /data/owner'")
	sh(t, "kubectl -n "+apps+" delete pod owner --wait=true --timeout=90s")
}
