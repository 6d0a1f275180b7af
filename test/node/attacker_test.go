//go:build node

package node

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	attackerNS    = "attacker"
	probeImage    = "localhost/nfsprobe:test" // test/node/nfsprobe and busybox's sleep
	probeInImage  = "/nfsprobe"
	probeTimeout  = "--timeout 20s"
	victimClaim   = "victim"
	victimPod     = "victim"
	attackerWrite = "attacker-was-here"
)

// probeResult is the JSON line nfsprobe prints (test/node/nfsprobe Result).
type probeResult struct {
	Op, Status, Step, Detail, FH, SHA256, Source string
	Bytes                                        int
	Entries                                      []string
}

// parseProbe returns the last JSON line of out.
func parseProbe(out string) (probeResult, error) {
	var r probeResult
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); strings.HasPrefix(l, "{") {
			return r, json.Unmarshal([]byte(l), &r)
		}
	}
	return r, fmt.Errorf("no JSON line in %q", out)
}

// probeImageBuild builds test/node/nfsprobe (static) into the cluster's
// images directory, where the nodes see it too, makes the image probeImage
// of it and busybox's sleep (hack/images) and imports it into every node's
// containerd (hack/cluster import).
func (c *cluster) probeImageBuild(t *testing.T) string {
	t.Helper()
	d := filepath.Join(c.dir, "images")
	bin := filepath.Join(d, "nfsprobe")
	sh(t, "mkdir -p "+d+" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "+bin+" ./test/node/nfsprobe")
	bb := strings.TrimSpace(sh(t, `readlink -f "$(command -v busybox)"`))
	spec, err := json.Marshal([]map[string]any{{
		"ref": probeImage, "cmd": []string{"/bin/sleep", "36000"}, "user": "65532",
		"files": []map[string]string{{"src": bin, "dst": probeInImage}, {"src": bb, "dst": "/bin/busybox"}},
		"links": map[string]string{"/bin/sleep": "busybox", "/bin/sh": "busybox"},
		"dirs":  []string{"/tmp"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	specFile, tar := filepath.Join(d, "nfsprobe-spec.json"), filepath.Join(d, "nfsprobe.tar")
	if err := os.WriteFile(specFile, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, "cat "+specFile)
	sh(t, "(cd hack/images && go run . -o "+tar+" <"+specFile+")")
	sh(t, "CLUSTER_DIR="+c.dir+" hack/cluster import "+tar)
	os.Remove(tar)
	os.Remove(specFile)
	return bin
}

// attackerPod is an unprivileged pod of the attacker namespace on node,
// running probeImage: no host network, non-root, no capabilities, no
// service account token.
func attackerPod(name, node string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
spec:
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  nodeSelector:
    kubernetes.io/hostname: %s
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: probe
      image: %s
      imagePullPolicy: Never
      command: ["/bin/sleep", "36000"]
      securityContext:
        privileged: false
        allowPrivilegeEscalation: false
        capabilities:
          drop: ["ALL"]
`, name, attackerNS, node, probeImage)
}

// 2d. An unprivileged pod of another namespace, with an NFS client of its own
// (nfsprobe), on a node the volume is not published to and on the node it is
// published to (a pod's address is not its node's), calling the export
// server's pod address and its Service address: MOUNT of "/" and of the
// volume, NFS calls with the handles of the volume and of a file in it copied
// from the published node, NLM LOCK of that file and the admin API without
// the token are each refused with the protocol's error; the server logs a
// refusal of the pod's address; the file was neither read nor changed.
func (c *cluster) attacker(t *testing.T) {
	if !c.multiNode() {
		t.Skip("needs two worker nodes (hack/cluster up --nodes 3)")
	}
	if out, _ := quiet("helm status " + release + " -n " + ns); !strings.Contains(out, "deployed") {
		t.Skip("the chart is not installed")
	}
	w := c.workers()
	published, other := w[0], w[len(w)-1]
	since := time.Now().UTC().Format(time.RFC3339)
	bin := c.probeImageBuild(t)
	t.Cleanup(func() {
		try(t, "kubectl delete namespace "+attackerNS+" --wait=true --timeout=120s")
		try(t, "kubectl -n "+apps+" delete pod "+victimPod+" --ignore-not-found --wait=true --timeout=90s")
		try(t, "kubectl -n "+apps+" delete pvc "+victimClaim+" --ignore-not-found --wait=true --timeout=90s")
		os.Remove(bin)
	})

	// the victim: a claim published to one node, a file only its pod may read
	quiet("kubectl create namespace " + apps)
	apply(t, pvc(victimClaim, "nfsrdma", "1Gi", "ReadWriteOnce", ""))
	apply(t, podOn(victimPod, victimClaim, published, busybox))
	sh(t, "kubectl -n "+apps+" wait --for=condition=Ready pod/"+victimPod+" --timeout=180s")
	secretSum := func() string {
		out := sh(t, "kubectl -n "+apps+" exec "+victimPod+" -- sh -c 'ls -ln /data && sha256sum /data/secret'")
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[1] == "/data/secret" {
				return f[0]
			}
		}
		t.Fatalf("no sha256 of /data/secret in %q", out)
		return ""
	}
	sh(t, "kubectl -n "+apps+" exec "+victimPod+" -- sh -c 'umask 077 && head -c 48 /dev/urandom | od -An -tx1 >/data/secret && chmod 600 /data/secret'")
	sum0 := secretSum()
	pv := strings.TrimSpace(sh(t, "kubectl -n "+apps+" get pvc "+victimClaim+" -o jsonpath='{.spec.volumeName}'"))
	export := strings.TrimSpace(sh(t, "kubectl get pv "+pv+" -o jsonpath='{.spec.csi.volumeAttributes.export}'"))
	onDisk := filepath.Join(c.dir, "pv", "export", "export", pv) // the volume's directory on the export server's disk
	sh(t, "ls -ln "+onDisk+" && sha256sum "+filepath.Join(onDisk, "secret"))

	// the export server: its pod's address, its Service's, the ports by name
	svc := release + "-server"
	podIP := strings.TrimSpace(sh(t, "kubectl -n "+ns+" get pod "+serverPod+" -o jsonpath='{.status.podIP}'"))
	clusterIP := strings.TrimSpace(sh(t, "kubectl -n "+ns+" get service "+svc+" -o jsonpath='{.spec.clusterIP}'"))
	ports := map[string]string{}
	for _, l := range strings.Split(sh(t, "kubectl -n "+ns+" get service "+svc+` -o jsonpath='{range .spec.ports[*]}{.name}={.port}{"\n"}{end}'`), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			ports[k] = v
		}
	}
	for _, p := range []string{"mount", "nfs", "nlm", "admin"} {
		if ports[p] == "" {
			t.Fatalf("service %s has no port %q: %v", svc, p, ports)
		}
	}
	servers := []string{podIP}
	if clusterIP != "" && clusterIP != "None" {
		servers = append(servers, clusterIP)
	} else {
		fmt.Printf("(service %s is headless: the server is on its node's host network; no ClusterIP to try)\n", svc)
	}

	// the handles, as the published node obtains them (its host network)
	onPublished := func(args string) probeResult {
		r, err := parseProbe(sh(t, c.onNode(published, bin+" "+probeTimeout+" "+args)))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	root := onPublished("mount " + podIP + ":" + ports["mount"] + " " + export)
	if root.Status != "MNT3_OK" || root.FH == "" {
		t.Fatalf("the published node %s cannot mount %s: %+v", published, export, root)
	}
	file := onPublished("lookup " + podIP + ":" + ports["nfs"] + " " + root.FH + " secret")
	if file.Status != "NFS3_OK" || file.FH == "" {
		t.Fatalf("the published node %s cannot look up the secret file: %+v", published, file)
	}

	// the attacker pods
	quiet("kubectl delete namespace " + attackerNS + " --ignore-not-found --wait=true --timeout=55s") // left by an interrupted run
	sh(t, "kubectl create namespace "+attackerNS)
	waitOut(t, time.Minute, "the service account of namespace "+attackerNS, "kubectl -n "+attackerNS+" get serviceaccount default -o name",
		func(o string) bool { return strings.TrimSpace(o) != "" })
	pods := map[string]string{"attacker-elsewhere": other, "attacker-beside": published}
	for p, n := range pods {
		apply(t, attackerPod(p, n))
	}
	sh(t, "kubectl -n "+attackerNS+" wait --for=condition=Ready pod --all --timeout=120s")
	sh(t, "kubectl -n "+attackerNS+" get pods -o wide")
	nodeIPs := map[string]bool{}
	for _, n := range c.allNodes() {
		nodeIPs[c.nodeIP(t, n)] = true
	}

	for _, p := range []string{"attacker-elsewhere", "attacker-beside"} {
		ip := strings.TrimSpace(sh(t, "kubectl -n "+attackerNS+" get pod "+p+" -o jsonpath='{.status.podIP}'"))
		fmt.Printf("\n# pod %s/%s (%s) on node %s (the volume is published to %s)\n", attackerNS, p, ip, pods[p], published)
		if nodeIPs[ip] {
			t.Fatalf("pod %s has its node's address %s: not the unprivileged pod this step needs", p, ip)
		}
		for _, srv := range servers {
			c.attack(t, p, ip, srv, ports, export, root.FH, file.FH)
		}
		// the server logs the refusals of the pod's own address
		logs := sh(t, "kubectl -n "+ns+" logs "+serverPod+" -c server --since-time="+since+" | grep -E 'call refused|request refused' | grep -F '"+ip+"' || true")
		for _, prog := range []string{"MOUNT", "NFS", "NLM"} {
			if !regexp.MustCompile(`"nfs server: call refused" client="` + regexp.QuoteMeta(ip) + `" program="` + prog + `"`).MatchString(logs) {
				t.Errorf("the export server logged no %s refusal of pod %s (%s)", prog, p, ip)
			}
		}
		if !strings.Contains(logs, `"admin: request refused: bad or missing token" remote="`+ip+`:`) {
			t.Errorf("the export server logged no admin API refusal of pod %s (%s)", p, ip)
		}
	}

	// nothing read, nothing changed
	if sum := secretSum(); sum != sum0 {
		t.Errorf("the secret file changed: sha256 %s, was %s", sum, sum0)
	}
	out := sh(t, "ls -ln "+onDisk+" && sha256sum "+filepath.Join(onDisk, "secret"))
	if !strings.Contains(out, sum0) {
		t.Errorf("the secret file on the export server's disk is not the one the owner wrote (sha256 %s)", sum0)
	}
	if strings.Contains(out, attackerWrite) {
		t.Errorf("the attacker's CREATE made %s in the volume", attackerWrite)
	}
	sh(t, "kubectl -n "+ns+" logs "+serverPod+" -c server --since-time="+since+" | grep -E 'call refused|request refused' || true")
}

// attack runs every refused call from pod (address ip) against the export
// server at srv and checks each status.
func (c *cluster) attack(t *testing.T, pod, ip, srv string, ports map[string]string, export, rootFH, fileFH string) {
	t.Helper()
	mnt, nfs, nlm := srv+":"+ports["mount"], srv+":"+ports["nfs"], srv+":"+ports["nlm"]
	for _, a := range []struct {
		args string
		want []string // the answers that refuse
	}{
		// "/" is refused, or not exported at all (the chart's default: no rootExport.clients)
		{"mount " + mnt + " /", []string{"MNT3ERR_ACCES", "MNT3ERR_NOENT"}},
		{"mount " + mnt + " " + export, []string{"MNT3ERR_ACCES"}},
		{"getattr " + nfs + " " + rootFH, []string{"NFS3ERR_ACCES"}},
		{"readdir " + nfs + " " + rootFH, []string{"NFS3ERR_ACCES"}},
		{"read " + nfs + " " + fileFH, []string{"NFS3ERR_ACCES"}},
		{"read " + nfs + " " + rootFH + " secret", []string{"NFS3ERR_ACCES"}},
		{"write " + nfs + " " + fileFH, []string{"NFS3ERR_ACCES"}},
		{"write " + nfs + " " + rootFH + " " + attackerWrite, []string{"NFS3ERR_ACCES"}},
		{"lock " + nlm + " " + fileFH, []string{"NLM4_FAILED"}},
		{"admin http://" + srv + ":" + ports["admin"] + "/v1/volumes", []string{"HTTP 401"}},
	} {
		out, err := try(t, "kubectl -n "+attackerNS+" exec "+pod+" -- "+probeInImage+" "+probeTimeout+" "+a.args)
		r, perr := parseProbe(out)
		switch {
		case err != nil || perr != nil:
			t.Errorf("pod %s: nfsprobe %s: no answer (%v, %v): the server must answer with the protocol's error "+
				"(a CNI enforcing the chart's NetworkPolicy would drop the connection instead, and the server would log nothing)", pod, a.args, err, perr)
		case !slices.Contains(a.want, r.Status):
			hint := ""
			if strings.HasSuffix(r.Status, "_OK") || r.Status == "NLM4_GRANTED" || strings.HasPrefix(r.Status, "HTTP 2") {
				hint = fmt.Sprintf(": the server granted pod %s (%s): it saw the call come from an address the volume is exported to "+
					"(a node's: is the pod's traffic to %s masqueraded?)", pod, ip, srv)
			}
			t.Errorf("pod %s: nfsprobe %s: %s, want %s%s", pod, a.args, r.Status, strings.Join(a.want, " or "), hint)
		}
		if r.Bytes != 0 || r.SHA256 != "" || len(r.Entries) > 0 {
			t.Errorf("pod %s: nfsprobe %s read or wrote: %+v", pod, a.args, r)
		}
	}
}
