// Package archtest checks the layer order of docs/architecture.md for
// every package of the module: a package's non-test imports from the
// module are packages of layers below its own, and production code never
// imports a test fixture (the fixtures are the top layers).
package archtest

import (
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/nfsrdma/nfsrdma-csi"

// layer is one row of the layer order (docs/architecture.md, "Layers"):
// its packages, relative to the module.
type layer struct {
	name string
	pkgs []string
	// sameLayer: a package may also import packages of this layer (only
	// the test fixtures, which build on one another).
	sameLayer bool
}

// layers is the layer order, bottom up. A package listed here but absent
// from the module is ignored (packages come and go on branches); a package
// of the module listed nowhere is an error: each new package takes a
// place in the order.
var layers = []layer{
	{name: "libraries", pkgs: []string{"pkg/xdr", "pkg/fairshare", "internal/atomicfile", "internal/posixlock", "internal/lograte", "internal/unixsock"}},
	{name: "RDMA verbs", pkgs: []string{"pkg/verbs"}},
	{name: "verbs providers", pkgs: []string{"pkg/verbs/siw", "pkg/verbs/ibverbs"}},
	{name: "device choice, ONC RPC", pkgs: []string{"pkg/verbs/devselect", "pkg/sunrpc"}},
	{name: "RPC-over-RDMA", pkgs: []string{"pkg/rpcrdma"}},
	{name: "protocol XDR, admin API types", pkgs: []string{"pkg/nfs/nfs3", "pkg/nfs/nlm", "pkg/nfs/nsm", "pkg/nfs/nsmstate", "pkg/nfs/admin"}},
	{name: "status monitor", pkgs: []string{"pkg/nfs/statmon"}},
	{name: "MOUNT XDR, mount options, lock callbacks", pkgs: []string{"pkg/nfs/mount3", "pkg/nfs/mountopts", "pkg/nfs/lockcb"}},
	{name: "control-side metrics", pkgs: []string{"pkg/metrics"}},
	{name: "protocol roles and state", pkgs: []string{"pkg/nfs/client", "pkg/nfs/lockd", "pkg/nfs/volumes",
		"pkg/nfs/transport", "pkg/fuseuring", "pkg/csi/credits", "pkg/csi/mounter", "pkg/csi/nodecert"}},
	{name: "protocol server, FUSE file system, CSI services", pkgs: []string{"pkg/nfs/server", "pkg/nfs/fusefs", "pkg/csi",
		"pkg/csi/deviceplugin", "pkg/csi/health", "pkg/csi/registration", "pkg/perftest"}},
	{name: "data-path metrics", pkgs: []string{"pkg/metrics/counters", "pkg/metrics/fusecounters"}},
	{name: "processes", pkgs: []string{"pkg/nfs/exportd", "pkg/nfs/fusemount", "pkg/csi/plugin"}},
	{name: "demo", pkgs: []string{"pkg/demo"}},
	{name: "binary", pkgs: []string{"cmd/driver"}},
	{name: "test fixtures", sameLayer: true, pkgs: []string{"internal/testfix/testenv", "internal/testfix/rpctest",
		"internal/testfix/lockdtest", "internal/testfix/exporttest", "internal/testfix/kernelpeer",
		"internal/testfix/kernelpeer/fcntllock", "internal/testfix/fsyncwriter", "internal/testfix/testpki", "internal/testfix/tlspeer", "internal/testfix/wakeups", "internal/testfix/xdrtest"}},
	{name: "tests", pkgs: []string{"internal/archtest", "deploy", "test/e2e", "test/node", "test/node/nfsprobe"}},
}

// rank returns each listed package's layer index.
func rank(ls []layer) map[string]int {
	r := map[string]int{}
	for i, l := range ls {
		for _, p := range l.pkgs {
			r[p] = i
		}
	}
	return r
}

// violations returns what breaks the order ls in the import graph imports
// (package -> its imports of the module, both relative to the module):
// an import of a layer above, or beside without sameLayer, and a package
// in no layer.
func violations(ls []layer, imports map[string][]string) []string {
	r := rank(ls)
	var out []string
	for _, pkg := range mapKeys(imports) {
		li, ok := r[pkg]
		if !ok {
			out = append(out, fmt.Sprintf("%s is in no layer: give it one in internal/archtest and docs/architecture.md", pkg))
			continue
		}
		for _, imp := range imports[pkg] {
			lj, ok := r[imp]
			switch {
			case !ok:
				// reported as a package of its own
			case lj > li:
				out = append(out, fmt.Sprintf("%s (layer %q) imports %s of the layer above %q", pkg, ls[li].name, imp, ls[lj].name))
			case lj == li && !ls[li].sameLayer:
				out = append(out, fmt.Sprintf("%s imports %s of its own layer %q", pkg, imp, ls[li].name))
			}
		}
	}
	return out
}

func mapKeys(m map[string][]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// moduleImports lists every package of the module under build tags (go
// list), with its non-test imports of the module, relative to it.
func moduleImports(t *testing.T, tags string) map[string][]string {
	t.Helper()
	cmd := exec.Command(goTool(t), "list", "-tags", tags, "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatal("go list:", err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkg, ok := strings.CutPrefix(f[0], module+"/")
		if !ok {
			continue
		}
		m[pkg] = nil
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
				m[pkg] = append(m[pkg], rel)
			}
		}
	}
	if len(m) == 0 {
		t.Fatal("go list: no package")
	}
	return m
}

// TestLayerOrder: every package of the module, built with and without
// the ibverbs tag, imports only packages of layers below its own.
func TestLayerOrder(t *testing.T) {
	for _, tags := range []string{"", "ibverbs"} {
		for _, v := range violations(layers, moduleImports(t, tags)) {
			t.Errorf("tags %q: %s", tags, v)
		}
	}
}

// TestViolationsFound: the check reports an import of a layer above, one
// beside, production code importing a fixture, and a package of no layer;
// a fixture importing a fixture, an import downward and a listed package
// missing from the module are fine.
func TestViolationsFound(t *testing.T) {
	ls := []layer{
		{name: "low", pkgs: []string{"a", "b", "gone"}},
		{name: "high", pkgs: []string{"c"}},
		{name: "fixtures", sameLayer: true, pkgs: []string{"f", "g"}},
	}
	got := violations(ls, map[string][]string{
		"a": {"c"},      // upward
		"b": {"a"},      // beside
		"c": {"a", "f"}, // downward; a fixture
		"f": {"g", "c"}, // fixtures build on fixtures
		"g": nil,
		"x": {"a"}, // in no layer
	})
	want := []string{
		`a (layer "low") imports c of the layer above "high"`,
		`b imports a of its own layer "low"`,
		`c (layer "high") imports f of the layer above "fixtures"`,
		"x is in no layer: give it one in internal/archtest and docs/architecture.md",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// separations: beyond the order, packages (go list patterns, relative to
// the module) and the import path prefixes none of them may depend on,
// directly or through another package.
var separations = []struct {
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
		// The packages that count keep their own snapshot types and know
		// nothing of Prometheus: the collectors (pkg/metrics/counters) sit
		// above them and read those types, never the other way round.
		pkgs:      []string{"./pkg/rpcrdma/...", "./pkg/nfs/server/...", "./pkg/nfs/fusefs/...", "./pkg/verbs/..."},
		forbidden: []string{module + "/pkg/metrics", "github.com/prometheus"},
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

// TestSeparations: the separations hold (go list -deps).
func TestSeparations(t *testing.T) {
	for _, l := range separations {
		for pkg, ds := range deps(t, l.pkgs, l.forbidden) {
			t.Errorf("%s depends on %s", pkg, strings.Join(ds, ", "))
		}
	}
}
