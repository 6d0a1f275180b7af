package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const (
	// helmModule is built from the Go module proxy; helm is not a
	// dependency of this module.
	helmModule  = "helm.sh/helm/v3/cmd/helm"
	helmVersion = "v3.22.0"
	kubeVersion = "v1.36.0"
	chartDir    = "helm/nfsrdma-csi"
	releaseName = "nfsrdma-csi"
	namespace   = "kube-system"
)

var (
	helmOnce sync.Once
	helmBin  string
	helmErr  error
	helmSkip bool
)

// helm returns the path of a helm binary of helmVersion, building it once
// with `go install` into $(go env GOCACHE)/../nfsrdma-helm/<version>/ (a
// couple of minutes the first time). Outside CI (CI != "true") a build
// that fails for want of network skips the test; otherwise it fails.
func helm(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() { helmBin, helmSkip, helmErr = buildHelm() })
	if helmErr != nil {
		if helmSkip && os.Getenv("CI") != "true" {
			t.Skipf("helm %s cannot be built (no network to the Go module proxy?); set CI=true to fail instead: %v", helmVersion, helmErr)
		}
		t.Fatalf("helm %s: %v", helmVersion, helmErr)
	}
	return helmBin
}

func goCommand() string {
	// go test puts $GOROOT/bin first in PATH for the tests it runs.
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

func buildHelm() (path string, offline bool, err error) {
	out, err := exec.Command(goCommand(), "env", "GOCACHE").Output()
	if err != nil {
		return "", false, fmt.Errorf("go env GOCACHE: %w", err)
	}
	cacheDir := filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "nfsrdma-helm", helmVersion)
	path = filepath.Join(cacheDir, "helm")
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return path, false, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", false, err
	}
	tmp, err := os.MkdirTemp(cacheDir, "build-")
	if err != nil {
		return "", false, err
	}
	defer os.RemoveAll(tmp)
	// Build outside this module (its go.mod must not change) into a
	// temporary GOBIN, then rename into place: concurrent builders each
	// produce a whole binary.
	cmd := exec.Command(goCommand(), "install", helmModule+"@"+helmVersion)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+filepath.Join(tmp, "bin"), "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", looksOffline(string(out)), fmt.Errorf("go install %s@%s: %w\n%s", helmModule, helmVersion, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, "bin", "helm"), path); err != nil {
		return "", false, err
	}
	return path, false, nil
}

// looksOffline reports whether go's output says the module proxy could not
// be reached.
func looksOffline(out string) bool {
	for _, s := range []string{"dial tcp", "no such host", "connection refused", "i/o timeout",
		"network is unreachable", "TLS handshake timeout", "proxyconnect", "temporary failure in name resolution"} {
		if strings.Contains(strings.ToLower(out), strings.ToLower(s)) {
			return true
		}
	}
	return false
}

// runHelm runs helm with args and returns its standard output, or the error
// with its standard error.
func runHelm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	// Keep helm away from the user's repositories and caches.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// templateArgs are the arguments of `helm template` for the release used in
// tests and for deploy/manifests, plus --set for each of sets.
func templateArgs(sets ...string) []string {
	args := []string{"template", releaseName, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

// render runs helm template with sets and fails the test on an error.
func render(t *testing.T, sets ...string) []byte {
	t.Helper()
	out, err := runHelm(t, templateArgs(sets...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// VolumeSnapshotClass mirrors snapshot.storage.k8s.io/v1 VolumeSnapshotClass
// (github.com/kubernetes-csi/external-snapshotter/client/v8, not a
// dependency here), for strict decoding.
type VolumeSnapshotClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Driver            string            `json:"driver"`
	Parameters        map[string]string `json:"parameters,omitempty"`
	DeletionPolicy    string            `json:"deletionPolicy"`
}

// object is one rendered document, decoded.
type object struct {
	kind, name, namespace string
	obj                   any // a typed API object, e.g. *appsv1.DaemonSet
}

var strictYAML = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	json.SerializerOptions{Yaml: true, Strict: true})

// decodeAll splits a multi-document YAML stream and decodes every document
// strictly into the Kubernetes API types: an unknown or duplicate field,
// an unknown kind or a wrong type is an error.
func decodeAll(data []byte) ([]object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if isEmptyDoc(doc) {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%w in\n%s", err, doc)
		}
		var (
			obj  any
			meta metav1.Object
		)
		if tm.APIVersion == "snapshot.storage.k8s.io/v1" && tm.Kind == "VolumeSnapshotClass" {
			vsc := &VolumeSnapshotClass{}
			if err := yaml.UnmarshalStrict(doc, vsc); err != nil {
				return nil, fmt.Errorf("VolumeSnapshotClass: %w", err)
			}
			obj, meta = vsc, vsc
		} else {
			o, gvk, err := strictYAML.Decode(doc, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w\n%s", tm.APIVersion, tm.Kind, err, doc)
			}
			if gvk.Kind != tm.Kind {
				return nil, fmt.Errorf("decoded %v for kind %s", gvk, tm.Kind)
			}
			m, ok := o.(metav1.Object)
			if !ok {
				return nil, fmt.Errorf("%T has no object metadata", o)
			}
			obj, meta = o, m
		}
		objs = append(objs, object{kind: tm.Kind, name: meta.GetName(), namespace: meta.GetNamespace(), obj: obj})
	}
}

func isEmptyDoc(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		l := strings.TrimSpace(line)
		if l != "" && !strings.HasPrefix(l, "#") && l != "---" {
			return false
		}
	}
	return true
}

// renderObjects renders the chart with sets and decodes the result.
func renderObjects(t *testing.T, sets ...string) []object {
	t.Helper()
	objs, err := decodeAll(render(t, sets...))
	if err != nil {
		t.Fatalf("strict decoding of the chart rendered with %v: %v", sets, err)
	}
	return objs
}

// find returns the typed object of kind (and name, when not empty); it
// fails the test when there is not exactly one.
func find[T any](t *testing.T, objs []object, kind, name string) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if o.kind == kind && (name == "" || o.name == name) {
			v, ok := o.obj.(T)
			if !ok {
				t.Fatalf("%s %s decoded as %T", kind, o.name, o.obj)
			}
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s name %q, want 1", len(found), kind, name)
	}
	return found[0]
}

func count(objs []object, kind string) int {
	n := 0
	for _, o := range objs {
		if o.kind == kind {
			n++
		}
	}
	return n
}
