//go:build node

package node

import (
	"os"
	"strings"
	"testing"
)

// allNodes returns the cluster's nodes by name (NFSRDMA_NODES from hack/cluster env):
// node 1 is this host; nodes 2..N are node "containers" (their own namespaces).
func (c *cluster) allNodes() []string {
	if n := strings.Fields(os.Getenv("NFSRDMA_NODES")); len(n) > 0 {
		return n
	}
	return []string{c.node}
}

// workers returns the nodes workloads run on: nodes 2..N of a cluster of several
// (node 1 runs the control plane and the export server, tainted as kind's
// control-plane node is), or the one node.
func (c *cluster) workers() []string {
	if n := c.allNodes(); len(n) > 1 {
		return n[1:]
	}
	return []string{c.node}
}

// multiNode reports whether the cluster has two worker nodes or more.
func (c *cluster) multiNode() bool { return len(c.workers()) > 1 }

// quote quotes s for a POSIX shell.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// onNode returns the command line that runs the shell command cmd on node: as it is on
// node 1 (this host), through `hack/cluster exec` (every namespace of the node) on the
// others.
func (c *cluster) onNode(node, cmd string) string {
	if node == c.node {
		return "sh -c " + quote(cmd)
	}
	return "hack/cluster exec " + node + " sh -c " + quote(cmd)
}

// podNode returns the node pod (of the apps namespace) runs on.
func (c *cluster) podNode(t *testing.T, pod string) string {
	t.Helper()
	return strings.TrimSpace(sh(t, "kubectl -n "+apps+" get pod "+pod+" -o jsonpath='{.spec.nodeName}'"))
}

// nodeMounts returns node's FUSE mounts under kubelet's pods directory.
func (c *cluster) nodeMounts(t *testing.T, node string) []string {
	t.Helper()
	out, err := quiet(c.onNode(node, "cat /proc/self/mountinfo"))
	if err != nil {
		t.Fatalf("mountinfo of node %s: %v: %s", node, err, out)
	}
	var ms []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 10 || !strings.HasPrefix(f[4], "/var/lib/kubelet/pods/") {
			continue
		}
		for i, x := range f {
			if x == "-" && i+1 < len(f) && strings.HasPrefix(f[i+1], "fuse") {
				ms = append(ms, f[4])
			}
		}
	}
	return ms
}

// allMounts returns the FUSE mounts of pods on every node, as "node: path".
func (c *cluster) allMounts(t *testing.T) []string {
	t.Helper()
	var ms []string
	for _, n := range c.allNodes() {
		for _, m := range c.nodeMounts(t, n) {
			ms = append(ms, n+": "+m)
		}
	}
	return ms
}

// listProcs is the shell command that lists a node's processes, one per line: pid,
// then the arguments, tab-separated. On node 1 (this host, whose /proc also shows the
// other nodes' processes) those in another node's cgroup are left out.
const listProcs = `for p in /proc/[0-9]*; do
  grep -q nfsrdma-n "$p/cgroup" 2>/dev/null && continue
  a=$(tr '\0' '\t' <"$p/cmdline" 2>/dev/null) || continue
  [ -n "$a" ] && printf '%s\t%s\n' "${p#/proc/}" "$a"
done; true`

// nodeProcs returns node's processes (pid: command line) whose arguments match.
func (c *cluster) nodeProcs(node string, match func(args []string) bool) []string {
	out, _ := quiet(c.onNode(node, listProcs))
	var ps []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(strings.TrimRight(l, "\t"), "\t")
		if len(f) < 2 || !match(f[1:]) {
			continue
		}
		ps = append(ps, node+"/"+f[0]+": "+strings.Join(f[1:], " "))
	}
	return ps
}

// allProcs is nodeProcs over every node.
func (c *cluster) allProcs(match func(args []string) bool) []string {
	var ps []string
	for _, n := range c.allNodes() {
		ps = append(ps, c.nodeProcs(n, match)...)
	}
	return ps
}

// isMount matches a `driver mount` process.
func isMount(args []string) bool {
	return len(args) > 1 && strings.HasSuffix(args[0], "/driver") && args[1] == "mount"
}

// isDriver matches a process of the driver's or a sidecar's image.
func isDriver(args []string) bool {
	return args[0] == "/driver" || strings.HasPrefix(args[0], "/csi-")
}
