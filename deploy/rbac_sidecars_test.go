package deploy_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// sidecar is a CSI sidecar of the controller pod and the RBAC manifest its
// module ships (the rules its authors run it with).
type sidecar struct {
	name    string // the chart's container
	module  string // Go module path
	version string // v-prefixed; from hack/cluster
	rbac    string // path in the module
}

// clusterVersions reads the sidecar versions hack/cluster builds and runs
// (shell assignments such as PROV=6.4.0).
func clusterVersions(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("../hack/cluster")
	if err != nil {
		t.Fatal(err)
	}
	v := map[string]string{}
	for _, name := range []string{"PROV", "ATT", "RESIZER", "SNAPSHOTTER"} {
		m := regexp.MustCompile(`\b` + name + `=([0-9.]+)\b`).FindSubmatch(data)
		if m == nil {
			t.Fatalf("hack/cluster: no %s=VERSION", name)
		}
		v[name] = "v" + string(m[1])
	}
	return v
}

// moduleDir downloads mod@version into the module cache and returns its
// directory. Outside CI a download that fails for want of network skips
// the test.
func moduleDir(t *testing.T, mod, version string) string {
	t.Helper()
	cmd := exec.Command(goCommand(), "mod", "download", "-json", mod+"@"+version)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr == nil && info.Error != "" {
		err = fmt.Errorf("%s", info.Error)
	}
	if err != nil || info.Dir == "" {
		if looksOffline(string(out)+fmt.Sprint(err)) && os.Getenv("CI") != "true" {
			t.Skipf("go mod download %s@%s (no network to the Go module proxy?): %v", mod, version, err)
		}
		t.Fatalf("go mod download %s@%s: %v\n%s", mod, version, err, out)
	}
	return info.Dir
}

// grant is one verb on one resource of an API group.
type grant struct{ group, resource, verb string }

func (g grant) String() string {
	if g.group == "" {
		return g.verb + " " + g.resource
	}
	return g.verb + " " + g.resource + "." + g.group
}

// sorted returns the grants of m in order.
func sorted(m map[grant]bool) []grant {
	gs := slices.Collect(maps.Keys(m))
	slices.SortFunc(gs, func(a, b grant) int { return strings.Compare(a.String(), b.String()) })
	return gs
}

// grants expands rules into single grants; rules limited to resourceNames
// grant nothing here (the sidecars ask for whole resources).
func grants(rules []rbacv1.PolicyRule) map[grant]bool {
	m := map[grant]bool{}
	for _, r := range rules {
		if len(r.ResourceNames) > 0 {
			continue
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					m[grant{g, res, v}] = true
				}
			}
		}
	}
	return m
}

// boundRules returns the rules the chart grants the controller's service
// account: cluster-wide (ClusterRoles bound by ClusterRoleBindings) and in
// the release namespace (Roles or ClusterRoles bound by RoleBindings there).
func boundRules(t *testing.T, objs []object, sa string) (cluster, ns map[grant]bool) {
	t.Helper()
	clusterRoles := map[string][]rbacv1.PolicyRule{}
	roles := map[string][]rbacv1.PolicyRule{}
	for _, o := range objs {
		switch r := o.obj.(type) {
		case *rbacv1.ClusterRole:
			clusterRoles[r.Name] = r.Rules
		case *rbacv1.Role:
			roles[r.Name] = r.Rules
		}
	}
	binds := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == namespace
		})
	}
	var cr, nr []rbacv1.PolicyRule
	for _, o := range objs {
		switch b := o.obj.(type) {
		case *rbacv1.ClusterRoleBinding:
			if binds(b.Subjects) && b.RoleRef.Kind == "ClusterRole" {
				cr = append(cr, clusterRoles[b.RoleRef.Name]...)
			}
		case *rbacv1.RoleBinding:
			if !binds(b.Subjects) || b.Namespace != namespace {
				continue
			}
			if b.RoleRef.Kind == "ClusterRole" {
				nr = append(nr, clusterRoles[b.RoleRef.Name]...)
			} else {
				nr = append(nr, roles[b.RoleRef.Name]...)
			}
		}
	}
	return grants(cr), grants(nr)
}

// TestChartSidecarRBAC checks that the controller's service account has
// every verb on every resource that each sidecar's own deploy manifest
// (deploy/kubernetes/rbac.yaml of its module, at the version hack/cluster
// runs) asks for: its ClusterRole cluster-wide, its Role in the release
// namespace (or cluster-wide).
func TestChartSidecarRBAC(t *testing.T) {
	v := clusterVersions(t)
	sidecars := []sidecar{
		{"csi-provisioner", "github.com/kubernetes-csi/external-provisioner/v6", v["PROV"], "deploy/kubernetes/rbac.yaml"},
		{"csi-attacher", "github.com/kubernetes-csi/external-attacher/v4", v["ATT"], "deploy/kubernetes/rbac.yaml"},
		{"csi-resizer", "github.com/kubernetes-csi/external-resizer", v["RESIZER"], "deploy/kubernetes/rbac.yaml"},
		{"csi-snapshotter", "github.com/kubernetes-csi/external-snapshotter/v8", v["SNAPSHOTTER"], "deploy/kubernetes/csi-snapshotter/rbac-csi-snapshotter.yaml"},
	}
	objs := renderObjects(t)
	cluster, ns := boundRules(t, objs, "nfsrdma-csi-controller")
	for _, s := range sidecars {
		t.Run(s.name, func(t *testing.T) {
			path := filepath.Join(moduleDir(t, s.module, s.version), s.rbac)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want, err := decodeAll(data)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			n := 0
			for _, o := range want {
				switch r := o.obj.(type) {
				case *rbacv1.ClusterRole:
					for _, g := range sorted(grants(r.Rules)) {
						n++
						if !cluster[g] {
							t.Errorf("%s %s asks for %s cluster-wide (ClusterRole %s); the chart does not grant it", s.name, s.version, g, r.Name)
						}
					}
				case *rbacv1.Role:
					for _, g := range sorted(grants(r.Rules)) {
						n++
						if !cluster[g] && !ns[g] {
							t.Errorf("%s %s asks for %s in its namespace (Role %s); the chart does not grant it", s.name, s.version, g, r.Name)
						}
					}
				}
			}
			if n == 0 {
				t.Fatalf("%s: no ClusterRole or Role rules", path)
			}
		})
	}
}
