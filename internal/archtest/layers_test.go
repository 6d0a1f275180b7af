// Package archtest checks the direction of imports between the
// repository's packages: a package never depends, directly or through
// another, on a package of a layer above or beside it (docs/architecture.md).
package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/nfsrdma/nfsrdma-csi"

// layers: the packages (go list patterns, relative to the module) and
// the import path prefixes none of them may depend on.
var layers = []struct {
	pkgs      []string
	forbidden []string
}{
	{
		// The CSI plugin parses mount options and talks to servers over
		// TCP; the wire protocols, the FUSE file system and the export
		// server run in other processes (`driver mount`, `driver server`).
		pkgs: []string{"./pkg/csi/...", "./pkg/metrics"},
		forbidden: []string{module + "/pkg/verbs", module + "/pkg/rpcrdma", module + "/pkg/nfs/server",
			module + "/pkg/nfs/lockd", module + "/pkg/nfs/fusefs", module + "/pkg/nfs/transport", "github.com/hanwen/go-fuse"},
	},
	{
		// The FUSE file system is handed its NFS dialer: it chooses no
		// RDMA device and speaks no RPC-over-RDMA itself.
		pkgs:      []string{"./pkg/nfs/fusefs"},
		forbidden: []string{module + "/pkg/verbs", module + "/pkg/rpcrdma", module + "/pkg/nfs/server", module + "/pkg/nfs/transport"},
	},
	{
		// The volume registry drives the protocol server through its
		// Exporter interface: it imports neither the server nor what
		// serves it.
		pkgs: []string{"./pkg/nfs/volumes"},
		forbidden: []string{module + "/pkg/nfs/server", module + "/pkg/nfs/exportd", module + "/pkg/nfs/lockd",
			module + "/pkg/rpcrdma", module + "/pkg/verbs"},
	},
	{
		// The export server's process serves no FUSE mount.
		pkgs:      []string{"./pkg/nfs/exportd"},
		forbidden: []string{module + "/pkg/nfs/fusefs", module + "/pkg/nfs/fusemount", "github.com/hanwen/go-fuse"},
	},
	{
		// The FUSE over io_uring transport is go-fuse's, not ours: it
		// could move into go-fuse as it is.
		pkgs:      []string{"./pkg/fuseuring"},
		forbidden: []string{module},
	},
	{
		// Mount options are plain values (and NFS's port numbers).
		pkgs: []string{"./pkg/nfs/mountopts"},
		forbidden: []string{module + "/pkg/verbs", module + "/pkg/rpcrdma", module + "/pkg/sunrpc",
			module + "/pkg/nfs/client", module + "/pkg/nfs/server"},
	},
}

// goTool returns the go command on PATH.
func goTool(t *testing.T) string {
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("the go command is needed to list dependencies:", err)
	}
	return p
}

// deps returns, for each package matched by patterns, its dependencies
// (go list -deps, tests excluded) that are, or are under, one of the
// import paths prefixes.
func deps(t *testing.T, patterns []string, prefixes []string) map[string][]string {
	t.Helper()
	// each line: the package, then its transitive dependencies
	args := append([]string{"list", "-f", `{{.ImportPath}} {{join .Deps " "}}`}, patterns...)
	cmd := exec.Command(goTool(t), args...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatal("go list:", err)
	}
	bad := map[string][]string{}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatalf("go list %v: no package", patterns)
	}
	for _, line := range lines {
		f := strings.Fields(line)
		for _, d := range f[1:] {
			for _, p := range prefixes {
				if d == p || strings.HasPrefix(d, p+"/") {
					bad[f[0]] = append(bad[f[0]], d)
				}
			}
		}
	}
	return bad
}

func TestImportsOnlyDownward(t *testing.T) {
	for _, l := range layers {
		for pkg, ds := range deps(t, l.pkgs, l.forbidden) {
			t.Errorf("%s depends on %s", pkg, strings.Join(ds, ", "))
		}
	}
}
