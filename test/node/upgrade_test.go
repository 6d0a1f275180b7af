//go:build node

package node

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The driver image's tags (hack/cluster images): the release's, and the same
// tree built with another version string, to upgrade to.
const (
	tagNow  = "dev"
	tagNext = "dev-next"
)

// ioPod is one pod of the upgrade step: on node, with the claim at /data.
type ioPod struct{ name, node string }

// writerDone is what fsyncwriter prints when it stops.
type writerDone struct {
	bytes          int64
	sha, maxgap    string
	writes, errors int
	log            string // the whole log: errors with their times, the longest gaps
}

var doneRE = regexp.MustCompile(`done bytes=(\d+) sha256=([0-9a-f]{64}) writes=(\d+) errors=(\d+) maxgap=(\S+)`)

// startWriter starts fsyncwriter in pod p on /data/<pod>.dat (its log in the
// pod's /tmp/w.log).
func (c *cluster) startWriter(t *testing.T, p string) {
	t.Helper()
	sh(t, "kubectl -n "+apps+" exec "+p+" -- sh -c 'rm -f /tmp/stop && (setsid fsyncwriter -stop /tmp/stop /data/"+p+".dat >/tmp/w.log 2>&1 &)'")
}

// writerSize returns the size of pod p's file as p sees it.
func writerSize(p string) int64 {
	out, err := quiet("kubectl -n " + apps + " exec " + p + " -- stat -c %s /data/" + p + ".dat")
	if err != nil {
		return -1
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	return n
}

// writing waits until every writer's file has grown by at least one block.
func (c *cluster) writing(t *testing.T, what string, pods ...string) {
	t.Helper()
	for _, p := range pods {
		before := writerSize(p)
		waitFor(t, time.Minute, what+": "+p+" writes", func() (bool, string) {
			n := writerSize(p)
			return n > before && before >= 0, fmt.Sprintf("size %d, was %d", n, before)
		})
	}
}

// writerErrors returns the error lines pod p's writer printed so far.
func writerErrors(t *testing.T, p string) []string {
	t.Helper()
	out, err := quiet("kubectl -n " + apps + " exec " + p + " -- cat /tmp/w.log")
	if err != nil {
		t.Fatalf("writer log of %s: %v: %s", p, err, out)
	}
	var es []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "error ") {
			es = append(es, l)
		}
	}
	return es
}

// stopWriter stops pod p's writer and returns its summary.
func (c *cluster) stopWriter(t *testing.T, p string) writerDone {
	t.Helper()
	sh(t, "kubectl -n "+apps+" exec "+p+" -- touch /tmp/stop")
	out := waitOut(t, time.Minute, p+"'s writer stopped", "kubectl -n "+apps+" exec "+p+" -- cat /tmp/w.log",
		func(o string) bool { return doneRE.MatchString(o) })
	m := doneRE.FindStringSubmatch(out)
	d := writerDone{sha: m[2], maxgap: m[5], log: out}
	d.bytes, _ = strconv.ParseInt(m[1], 10, 64)
	d.writes, _ = strconv.Atoi(m[3])
	d.errors, _ = strconv.Atoi(m[4])
	fmt.Printf("(%s) %s", p, out)
	return d
}

// verifyFile checks, from pod reader (another node's mount), that pod w's
// file holds exactly what w's writer acknowledged: size and SHA-256.
func (c *cluster) verifyFile(t *testing.T, reader, w string, d writerDone) {
	t.Helper()
	out := sh(t, "kubectl -n "+apps+" exec "+reader+" -- sh -c 'stat -c %s /data/"+w+".dat && sha256sum /data/"+w+".dat'")
	f := strings.Fields(out)
	if len(f) < 2 {
		t.Fatalf("reading %s's file from %s: %q", w, reader, out)
	}
	size, _ := strconv.ParseInt(f[0], 10, 64)
	if size != d.bytes || f[1] != d.sha {
		t.Errorf("%s's file read from %s: %d bytes, sha256 %s; the writer acknowledged %d bytes, sha256 %s: acknowledged bytes lost or changed",
			w, reader, size, f[1], d.bytes, d.sha)
	}
}

// lockRefused checks that another pod's F_SETLK on the lock file is refused:
// the holder still holds it on the server. In the server's grace period
// after a restart the client retries until it ends (up to 90 s).
func (c *cluster) lockRefused(t *testing.T, other, file string) {
	t.Helper()
	out := sh(t, "kubectl -n "+apps+" exec "+other+" -- fcntllock "+file+" w 0 0")
	if strings.TrimSpace(out) != "denied" {
		t.Errorf("pod %s's F_SETLK on %s: %q, want denied: the holder's lock is lost", other, file, strings.TrimSpace(out))
	}
}

// nodePluginPod returns the node plugin's pod on node.
func (c *cluster) nodePluginPod(t *testing.T, node string) string {
	t.Helper()
	return strings.TrimSpace(sh(t, "kubectl -n "+ns+" get pods -l app.kubernetes.io/component=node --field-selector spec.nodeName="+node+" -o jsonpath='{.items[0].metadata.name}'"))
}

// mountVersions waits until every FUSE mount of the pods on every node is
// served by a binary of version want: the node plugin's metrics carry one
// nfsrdma_mount_binary_info per mount (with its version label), as many as
// the node has FUSE mounts.
func (c *cluster) mountVersions(t *testing.T, want string) {
	t.Helper()
	for _, n := range c.allNodes() {
		mounts := len(c.nodeMounts(t, n))
		if mounts == 0 {
			continue
		}
		plugin := c.nodePluginPod(t, n)
		cmd := "kubectl get --raw /api/v1/namespaces/" + ns + "/pods/" + plugin + ":9811/proxy/metrics | grep '^nfsrdma_mount_binary_info'"
		out := waitOut(t, 2*time.Minute, fmt.Sprintf("the %d mounts of node %s served by version %s", mounts, n, want), cmd,
			func(o string) bool {
				ls := strings.Split(strings.TrimSpace(o), "\n")
				if len(ls) != mounts {
					return false
				}
				for _, l := range ls {
					if !strings.Contains(l, `version="`+want+`"`) {
						return false
					}
				}
				return true
			})
		fmt.Printf("$ %s\n%s", cmd, out)
	}
}

// handoverLog prints the mount processes' "handover done" lines on node
// that took a mount over to version to, and fails when there is none.
func (c *cluster) handoverLog(t *testing.T, node, to string) {
	t.Helper()
	out := sh(t, c.onNode(node, `grep -h 'handover done' /var/lib/nfsrdma/*.log | grep 'direction="to"' | grep 'to_version="`+to+`"' | sed 's/ dir="[^"]*"//' || true`))
	if !strings.Contains(out, `to_version="`+to+`"`) {
		t.Errorf("node %s: no mount process logs a handover to version %s", node, to)
	}
}

// upgradeTo runs helm upgrade of the release to the driver image's tag and
// waits until every component runs it.
func (c *cluster) upgradeTo(t *testing.T, tag string) time.Duration {
	t.Helper()
	t0 := time.Now()
	sh(t, "helm upgrade "+release+" "+chartPath+" --namespace "+ns+" --reuse-values --set image.driver.tag="+tag+" --wait --timeout 5m")
	for _, r := range []string{"daemonset/" + release + "-mounter", "daemonset/" + release + "-node", "deployment/" + release + "-controller", "statefulset/" + release + "-server"} {
		sh(t, "kubectl -n "+ns+" rollout status "+r+" --timeout=180s")
	}
	took := time.Since(t0)
	sh(t, "kubectl -n "+ns+" get pods -o custom-columns=NAME:.metadata.name,NODE:.spec.nodeName,IMAGE:.spec.containers[0].image,READY:.status.containerStatuses[0].ready")
	return took
}

// mountProc returns the pid (in its node's namespace) of the mount process
// serving pod uid's volume on node, "" if none.
func (c *cluster) mountProc(node, uid string) string {
	ps := c.nodeProcs(node, func(a []string) bool {
		return isMount(a) && strings.Contains(a[len(a)-1], "/pods/"+uid+"/")
	})
	if len(ps) != 1 {
		return ""
	}
	return strings.TrimPrefix(strings.SplitN(ps[0], ":", 2)[0], node+"/")
}

// stamp is the writer's time format (UTC).
func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

// errorsBetween returns the error lines whose time is within [from, to].
func errorsBetween(es []string, from, to time.Time) []string {
	var in []string
	for _, e := range es {
		f := strings.Fields(e)
		if len(f) > 1 && f[1] >= stamp(from) && f[1] <= stamp(to) {
			in = append(in, e)
		}
	}
	return in
}

// 3b. Upgrades and crashes under I/O: pods on two nodes write with fsync and
// read back, one pod holds an fcntl lock, while (1) helm upgrade moves every
// component to another build of the driver (the mounters hand their mounts
// over), (2) one mount process is killed (kill -9: the mounter takes its
// connection up again), (3) helm upgrade goes back. No acknowledged byte is
// lost, the upgrades cause no I/O error, the lock stays held, every mount
// ends up served by the new binary; each writer's longest pause is printed.
func (c *cluster) upgradeUnderIO(t *testing.T) {
	w := c.workers()
	a, b := w[0], w[len(w)-1]
	writers := []ioPod{{"up-w1", a}, {"up-w2", b}}
	holder, checker := ioPod{"up-lock", a}, ioPod{"up-check", b}
	t.Cleanup(func() {
		try(t, "kubectl -n "+apps+" delete pod up-w1 up-w2 up-lock up-check --ignore-not-found --wait=true --timeout=120s")
		try(t, "kubectl -n "+apps+" delete pvc upgrade --ignore-not-found --wait=true --timeout=120s")
		// the release as the later steps expect it, whatever happened
		if out, _ := quiet("helm get values " + release + " -n " + ns + " -o json"); strings.Contains(out, tagNext) {
			try(t, "helm upgrade "+release+" "+chartPath+" --namespace "+ns+" --reuse-values --set image.driver.tag="+tagNow+" --wait --timeout 5m")
		}
	})
	apply(t, pvc("upgrade", "nfsrdma", "1Gi", "ReadWriteMany", ""))
	for _, p := range append(writers, holder, checker) {
		apply(t, podOn(p.name, "upgrade", p.node, locktest))
	}
	sh(t, "kubectl -n "+apps+" wait --for=condition=Ready pod/up-w1 pod/up-w2 pod/up-lock pod/up-check --timeout=180s")
	sh(t, "kubectl -n "+apps+" get pods -o wide")
	lockFile := "/data/upgrade.lock"
	sh(t, "kubectl -n "+apps+" exec up-lock -- sh -c 'touch "+lockFile+" && (setsid fcntllock -hold /tmp/release "+lockFile+" w 0 0 >/tmp/holder.log 2>&1 &)'")
	waitOut(t, 2*time.Minute, "the holder holds the lock", "kubectl -n "+apps+" exec up-lock -- cat /tmp/holder.log",
		func(o string) bool { return strings.HasPrefix(o, "locked") })
	c.lockRefused(t, "up-check", lockFile)
	for _, p := range writers {
		c.startWriter(t, p.name)
	}
	c.writing(t, "before the upgrade", "up-w1", "up-w2")

	// (1) the upgrade
	fmt.Printf("\n(1) helm upgrade to %s while the pods write\n", tagNext)
	up0 := time.Now()
	took := c.upgradeTo(t, tagNext)
	up1 := time.Now()
	fmt.Printf("the upgrade to %s took %v (%s to %s UTC)\n", tagNext, took.Round(100*time.Millisecond), stamp(up0), stamp(up1))
	c.mountVersions(t, tagNext)
	c.handoverLog(t, a, tagNext)
	c.handoverLog(t, b, tagNext)
	c.writing(t, "after the upgrade", "up-w1", "up-w2")
	for _, p := range writers {
		if es := writerErrors(t, p.name); len(es) > 0 {
			t.Errorf("pod %s saw I/O errors during the upgrade:\n%s", p.name, strings.Join(es, "\n"))
		}
	}
	if out := sh(t, "kubectl -n "+apps+" exec up-lock -- cat /tmp/holder.log"); strings.TrimSpace(out) != "locked" {
		t.Errorf("the holder's lock call ended during the upgrade: %q", out)
	}
	// the export server restarted too: in its grace period the check waits
	c.lockRefused(t, "up-check", lockFile)

	// (2) kill -9 of the mount process serving up-w1
	uid := c.uids(t, "up-w1")["up-w1"]
	pid := c.mountProc(a, uid)
	if pid == "" {
		t.Fatalf("no single mount process of pod up-w1 (uid %s) on node %s", uid, a)
	}
	fmt.Printf("\n(2) kill -9 of up-w1's mount process (pid %s on %s)\n", pid, a)
	k0 := time.Now()
	sh(t, c.onNode(a, "kill -9 "+pid))
	waitFor(t, time.Minute, "a new mount process serves up-w1's mount", func() (bool, string) {
		np := c.mountProc(a, uid)
		return np != "" && np != pid, "pid " + np
	})
	c.writing(t, "after the kill", "up-w1")
	k1 := time.Now()
	sh(t, c.onNode(a, `grep -h 'taking its connection up\|taken up again' /var/lib/nfsrdma/*.log 2>/dev/null | tail -3 || true`))
	sh(t, "kubectl -n "+ns+" logs -l app.kubernetes.io/component=mounter --tail=-1 | grep -h 'died\\|taken up' || true")
	es := writerErrors(t, "up-w1")
	fmt.Printf("the requests that failed in up-w1 after its mount process was killed at %s UTC:\n%s\n", stamp(k0), strings.Join(es, "\n"))
	if out := sh(t, "kubectl -n "+apps+" exec up-lock -- cat /tmp/holder.log"); strings.TrimSpace(out) != "locked" {
		t.Errorf("the holder's lock call ended: %q", out)
	}
	if es := writerErrors(t, "up-w2"); len(es) > 0 {
		t.Errorf("pod up-w2 (node %s, whose mounts were not touched) saw I/O errors:\n%s", b, strings.Join(es, "\n"))
	}

	// (3) back to the release's image
	fmt.Printf("\n(3) helm upgrade back to %s while the pods write\n", tagNow)
	back0 := time.Now()
	took = c.upgradeTo(t, tagNow)
	back1 := time.Now()
	fmt.Printf("the upgrade back to %s took %v (%s to %s UTC)\n", tagNow, took.Round(100*time.Millisecond), stamp(back0), stamp(back1))
	c.mountVersions(t, tagNow)
	c.writing(t, "after the upgrade back", "up-w1", "up-w2")
	c.lockRefused(t, "up-check", lockFile)

	// the end: every acknowledged byte is there, read from the other node
	fmt.Println("\nthe writers stop; their files are read from the other node's pods")
	done := map[string]writerDone{}
	for _, p := range writers {
		done[p.name] = c.stopWriter(t, p.name)
	}
	c.verifyFile(t, "up-check", "up-w1", done["up-w1"])
	c.verifyFile(t, "up-lock", "up-w2", done["up-w2"])
	for _, p := range writers {
		d := done[p.name]
		es := writerErrors(t, p.name)
		fmt.Printf("pod %s on %s: %d writes (each fsync'd and read back), %d bytes acknowledged, longest pause %s, %d errors\n",
			p.name, p.node, d.writes, d.bytes, d.maxgap, len(es))
		for _, w := range [][2]time.Time{{up0, up1}, {back0, back1}} {
			if in := errorsBetween(es, w[0], w[1]); len(in) > 0 {
				t.Errorf("pod %s: I/O errors during the upgrade of %s to %s UTC:\n%s", p.name, stamp(w[0]), stamp(w[1]), strings.Join(in, "\n"))
			}
		}
		if out := errorsBetween(es, k0, k1); len(out) != len(es) && p.name == "up-w1" {
			t.Errorf("pod %s: I/O errors outside the crash recovery (%s to %s UTC):\n%s", p.name, stamp(k0), stamp(k1), strings.Join(es, "\n"))
		}
		if d.writes == 0 {
			t.Errorf("pod %s wrote nothing", p.name)
		}
	}
	if out := sh(t, "kubectl -n "+apps+" exec up-lock -- cat /tmp/holder.log"); strings.TrimSpace(out) != "locked" {
		t.Errorf("the holder's lock call ended: %q", out)
	}
	sh(t, "kubectl -n "+apps+" exec up-lock -- touch /tmp/release")
	waitOut(t, 30*time.Second, "the holder let go", "kubectl -n "+apps+" exec up-lock -- cat /tmp/holder.log",
		func(o string) bool { return strings.Contains(o, "released") })
}

// 6b. kill -9 of a node's mounter (its main process, from the host): its
// mount processes end with its container, the node plugin keeps their FUSE
// connections, and the restarted mounter takes them up again (driver mount
// --recover); a pod writing with fsync on that node pauses, may see the
// documented EIO at an fsync, and loses no acknowledged byte.
func (c *cluster) mounterKilled(t *testing.T) {
	if out, _ := quiet("helm status " + release + " -n " + ns); !strings.Contains(out, "deployed") {
		t.Skip("the chart is not installed")
	}
	a := c.workers()[0]
	t.Cleanup(func() {
		try(t, "kubectl -n "+apps+" delete pod mk-w --ignore-not-found --wait=true --timeout=120s")
		try(t, "kubectl -n "+apps+" delete pvc mounterkill --ignore-not-found --wait=true --timeout=120s")
	})
	quiet("kubectl create namespace " + apps)
	apply(t, pvc("mounterkill", "nfsrdma", "1Gi", "ReadWriteOnce", ""))
	apply(t, podOn("mk-w", "mounterkill", a, locktest))
	sh(t, "kubectl -n "+apps+" wait --for=condition=Ready pod/mk-w --timeout=180s")
	c.startWriter(t, "mk-w")
	c.writing(t, "before the kill", "mk-w")
	ps := c.nodeProcs(a, func(x []string) bool { return len(x) > 1 && x[0] == "/driver" && x[1] == "mounter" })
	if len(ps) != 1 {
		t.Fatalf("mounter processes on %s: %v, want one", a, ps)
	}
	pid := strings.TrimPrefix(strings.SplitN(ps[0], ":", 2)[0], a+"/")
	mounter := strings.TrimSpace(sh(t, "kubectl -n "+ns+" get pods -l app.kubernetes.io/component=mounter --field-selector spec.nodeName="+a+" -o jsonpath='{.items[0].metadata.name}'"))
	before := c.allProcs(isMount)
	fmt.Printf("\nkill -9 of the mounter's main process (pid %s on %s, pod %s)\n", pid, a, mounter)
	k0 := time.Now()
	sh(t, c.onNode(a, "kill -9 "+pid))
	waitOut(t, 2*time.Minute, "the mounter restarted and ready", "kubectl -n "+ns+" get pod "+mounter+" -o jsonpath='{.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready}'",
		func(o string) bool { return o != "0 true" && strings.HasSuffix(o, " true") })
	fmt.Printf("mount processes before the kill: %v\nafter: %v\n", before, c.allProcs(isMount))
	waitFor(t, time.Minute, "pod mk-w writes again", func() (bool, string) {
		n1 := writerSize("mk-w")
		time.Sleep(2 * time.Second)
		n2 := writerSize("mk-w")
		return n2 > n1 && n1 >= 0, fmt.Sprintf("size %d then %d; writer errors: %v", n1, n2, writerErrors(t, "mk-w"))
	})
	k1 := time.Now()
	d := c.stopWriter(t, "mk-w")
	es := writerErrors(t, "mk-w")
	fmt.Printf("the requests that failed in mk-w after the mounter was killed at %s UTC: %v\n", stamp(k0), es)
	fmt.Printf("pod mk-w: %d writes (each fsync'd and read back), %d bytes acknowledged, longest pause %s\n", d.writes, d.bytes, d.maxgap)
	// what a crash of the serving process may cost (docs/kubernetes.md):
	// EIO at an fsync of a file the dead process held write-back data of;
	// never ENOTCONN, never an error outside the recovery
	in := errorsBetween(es, k0, k1)
	if len(in) != len(es) {
		t.Errorf("pod mk-w: I/O errors outside the recovery (%s to %s UTC):\n%s", stamp(k0), stamp(k1), strings.Join(es, "\n"))
	}
	for _, e := range in {
		if !strings.Contains(e, "input/output error") {
			t.Errorf("pod mk-w: an error other than the documented EIO after its node's mounter was killed: %s", e)
		}
	}
	c.verifyFile(t, "mk-w", "mk-w", d)
}
