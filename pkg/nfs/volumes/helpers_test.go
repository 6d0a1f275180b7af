package volumes

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

func decodeJSON(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("decoding the answer (HTTP %d): %v", resp.StatusCode, err)
	}
}

// waitSnapshot polls snapshot id until it is ready or failed.
func waitSnapshot(t testing.TB, a *admin.Client, id string) admin.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		s, err := a.GetSnapshot(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Ready || s.Error != "" {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitClone polls the clone into dest until it is ready or failed.
func waitClone(t testing.TB, a *admin.Client, dest string) admin.Clone {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		c, err := a.GetClone(ctx, dest)
		if err != nil {
			t.Fatal(err)
		}
		if c.Ready || c.Error != "" {
			return c
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const testAdminToken = "s3cret-admin-token"

// regEnv is a registry on a real directory with the admin API served
// over a real listener (no protocol server: nothing is exported).
type regEnv struct {
	root, state string
	reg         *Registry
	adm         *admin.Client
	http        *httptest.Server
}

// startRegEnv opens a registry on root with state directory state and
// serves its admin API until the test ends (or stop).
func startRegEnv(t testing.TB, root, state string) *regEnv {
	t.Helper()
	testenv.NeedRoot(t, "the registry's copies keep owners and walk trees of any owner")
	reg, err := New(Options{Root: root, StateDir: state, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.NewHandler(reg, testAdminToken)
	if err != nil {
		reg.Close()
		t.Fatal(err)
	}
	e := &regEnv{root: root, state: state, reg: reg, http: httptest.NewServer(h)}
	e.adm = admin.NewClient(e.http.URL, testAdminToken, nil)
	t.Cleanup(e.stop)
	return e
}

func (e *regEnv) stop() {
	if e.reg == nil {
		return
	}
	e.http.Close()
	e.reg.Close()
	e.reg = nil
}

func ctxLong(t testing.TB) context.Context { return testenv.Context(t, 2*time.Minute) }

// checkUsage compares the usage the registry keeps for volume p with a
// fresh walk of its tree.
func checkUsage(t *testing.T, e *regEnv, p string) admin.Volume {
	t.Helper()
	v, err := e.adm.GetVolume(testenv.Context(t, 30*time.Second), p)
	if err != nil {
		t.Fatal(err)
	}
	u, err := treeUsage(e.reg.rootFD, p)
	if err != nil {
		t.Fatal(err)
	}
	if v.UsedBytes != u.bytes || v.UsedInodes != u.inodes {
		t.Fatalf("volume %s: usage kept %d bytes, %d inodes; the tree holds %d bytes, %d inodes", p, v.UsedBytes, v.UsedInodes, u.bytes, u.inodes)
	}
	return v
}

// treeUsage walks directory rel beneath rootFD.
func treeUsage(rootFD int, rel string) (usage, error) {
	d, err := openDirBeneath(rootFD, rel)
	if err != nil {
		return usage{}, err
	}
	defer d.Close()
	return dirUsage(context.Background(), d)
}
