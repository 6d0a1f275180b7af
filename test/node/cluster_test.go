//go:build node

package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// cluster is the running cluster (from hack/cluster env).
type cluster struct {
	dir    string // NFSRDMA_CLUSTER_DIR: state, values.yaml, the export PV's directory
	node   string // the node's name
	values string // helm values for the local images
	repo   string // this checkout
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{dir: os.Getenv("NFSRDMA_CLUSTER_DIR"), node: os.Getenv("NFSRDMA_NODE_NAME")}
	missing := ""
	switch {
	case os.Getenv("KUBECONFIG") == "" || c.dir == "" || c.node == "":
		missing = "no cluster: run hack/cluster up, then eval \"$(hack/cluster env)\""
	case os.Geteuid() != 0:
		missing = "needs root (checks the host's mounts and processes)"
	}
	for _, b := range []string{"kubectl", "helm", "ctr"} {
		if _, err := exec.LookPath(b); missing == "" && err != nil {
			missing = b + " not in PATH (eval \"$(hack/cluster env)\")"
		}
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node e2e: %s", missing)
		}
		t.Skipf("node e2e: %s", missing)
	}
	c.values = c.dir + "/values.yaml"
	wd, _ := os.Getwd()
	c.repo = strings.TrimSuffix(wd, "/test/node")
	return c
}

// sh runs a shell command line as a user types it, printing "$ cmd" and its
// output; it fails the test on a non-zero exit.
func sh(t *testing.T, cmd string) string {
	t.Helper()
	out, err := try(t, cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return out
}

// try is sh without failing: the output and the error.
func try(t *testing.T, cmd string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", cmd)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	fmt.Printf("$ %s\n%s", cmd, out.String())
	if out.Len() > 0 && !bytes.HasSuffix(out.Bytes(), []byte("\n")) {
		fmt.Println()
	}
	return out.String(), err
}

// quiet runs a command without printing it (for polling).
func quiet(cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", cmd).CombinedOutput()
	return string(out), err
}

// waitFor polls cond every second until it holds or d passes; then it
// prints the command once more (as the user would see the final state).
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	t0 := time.Now()
	last := ""
	for {
		ok, desc := cond()
		if desc != "" {
			last = desc
		}
		if ok {
			t.Logf("%s: after %v", what, time.Since(t0).Round(100*time.Millisecond))
			return
		}
		if time.Since(t0) > d {
			t.Fatalf("%s: not reached after %v; last state: %s", what, d, last)
		}
		time.Sleep(time.Second)
	}
}

// waitOut polls a command until its output satisfies ok.
func waitOut(t *testing.T, d time.Duration, what, cmd string, ok func(string) bool) string {
	t.Helper()
	var out string
	waitFor(t, d, what, func() (bool, string) {
		o, err := quiet(cmd)
		out = o
		if err != nil {
			return false, fmt.Sprintf("%s: %v: %s", cmd, err, o)
		}
		return ok(o), o
	})
	return out
}

// apply pipes a manifest into kubectl apply, printing it.
func apply(t *testing.T, manifest string) {
	t.Helper()
	sh(t, "kubectl apply -f - <<'EOF'\n"+strings.TrimSpace(manifest)+"\nEOF")
}
