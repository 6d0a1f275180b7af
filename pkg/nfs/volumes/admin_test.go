package volumes

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

// TestAdminAPI drives every call of the admin client against the handler
// over a real listener: authentication, results, error codes and
// idempotency.
func TestAdminAPI(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	e := startRegEnv(t, root, state)
	ctx := testenv.Context(t, 30*time.Second)
	a := e.adm

	t.Run("auth", func(t *testing.T) {
		for _, tok := range []string{"", "wrong", testAdminToken + "x"} {
			_, err := admin.NewClient(e.http.URL, tok, nil).Status(ctx)
			wantErr(t, "token "+tok, err, admin.ErrUnauthenticated)
		}
		req, _ := http.NewRequest("GET", e.http.URL+"/v1/volumes", nil)
		req.Header.Set("Authorization", "Basic "+testAdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("Basic auth: %d %v", resp.StatusCode, resp.Header)
		}
		if _, err := admin.NewHandler(e.reg, ""); !errors.Is(err, admin.ErrNoToken) {
			t.Fatalf("empty token: %v", err)
		}
	})

	t.Run("status", func(t *testing.T) {
		st, err := a.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Version != "test" || st.Root != root || st.CapacityBytes <= 0 || st.FreeBytes <= 0 || st.FreeBytes > st.CapacityBytes {
			t.Fatalf("status %+v", st)
		}
	})

	for _, d := range []string{"pvc-1", "ns/pvc-2", "full/x"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("pvc-1", filepath.Join(root, "link"))
	os.WriteFile(filepath.Join(root, "afile"), nil, 0o644)

	t.Run("volumes", func(t *testing.T) {
		_, err := a.PutVolume(ctx, "missing", 1<<20)
		wantErr(t, "missing dir", err, admin.ErrPrecondition)
		_, err = a.PutVolume(ctx, "link", 1<<20)
		wantErr(t, "symlink", err, admin.ErrPrecondition)
		_, err = a.PutVolume(ctx, "afile", 1<<20)
		wantErr(t, "file", err, admin.ErrPrecondition)
		for _, bad := range []string{"", "/", "..", "a/../pvc-1", "a//b", "./x"} {
			_, err = a.PutVolume(ctx, bad, 1)
			if !errors.Is(err, admin.ErrInvalid) && !errors.Is(err, admin.ErrNotFound) {
				t.Fatalf("path %q: %v", bad, err)
			}
		}
		_, err = a.PutVolume(ctx, "pvc-1", -1)
		wantErr(t, "negative quota", err, admin.ErrInvalid)

		v, err := a.PutVolume(ctx, "pvc-1", 1<<30, map[string]string{"csi.volumeID": "vol-1"})
		if err != nil {
			t.Fatal(err)
		}
		if v.Path != "pvc-1" || v.QuotaBytes != 1<<30 || v.UsedInodes != 1 || v.UsedBytes <= 0 || len(v.Access) != 0 || v.Meta["csi.volumeID"] != "vol-1" {
			t.Fatalf("PutVolume: %+v", v)
		}
		v2, err := a.PutVolume(ctx, "/pvc-1", 1<<30) // idempotent; meta kept
		if err != nil || !reflect.DeepEqual(v, v2) {
			t.Fatalf("PutVolume again: %+v, %v; want %+v", v2, err, v)
		}
		if v2, err = a.PutVolume(ctx, "pvc-1", 2<<30); err != nil || v2.QuotaBytes != 2<<30 {
			t.Fatalf("raise quota: %+v, %v", v2, err)
		}
		if _, err := a.PutVolume(ctx, "ns/pvc-2", 0); err != nil {
			t.Fatal(err)
		}
		_, err = a.PutVolume(ctx, "pvc-1/sub", 0)
		wantErr(t, "nested in a volume", err, admin.ErrPrecondition)
		_, err = a.PutVolume(ctx, "ns", 0)
		wantErr(t, "around a volume", err, admin.ErrPrecondition)
		_, err = a.PutVolume(ctx, "pvc-1", 1, map[string]string{"": "x"})
		wantErr(t, "bad meta", err, admin.ErrInvalid)

		got, err := a.GetVolume(ctx, "ns/pvc-2")
		if err != nil || got.Path != "ns/pvc-2" || got.QuotaBytes != 0 {
			t.Fatalf("GetVolume: %+v, %v", got, err)
		}
		_, err = a.GetVolume(ctx, "full/x")
		wantErr(t, "GetVolume of an unregistered dir", err, admin.ErrNotFound)
		list, err := a.ListVolumes(ctx)
		if err != nil || len(list) != 2 || list[0].Path != "ns/pvc-2" || list[1].Path != "pvc-1" {
			t.Fatalf("ListVolumes: %+v, %v", list, err)
		}
	})

	t.Run("access", func(t *testing.T) {
		err := a.Grant(ctx, "pvc-1", admin.Access{Node: "n1", Addrs: []string{"not-an-ip"}})
		wantErr(t, "bad address", err, admin.ErrInvalid)
		err = a.Grant(ctx, "pvc-1", admin.Access{Node: "", Addrs: []string{"10.0.0.1"}})
		wantErr(t, "no node", err, admin.ErrInvalid)
		err = a.Grant(ctx, "pvc-1", admin.Access{Node: "n1"})
		wantErr(t, "no address", err, admin.ErrInvalid)
		err = a.Grant(ctx, "full/x", admin.Access{Node: "n1", Addrs: []string{"10.0.0.1"}})
		wantErr(t, "unregistered volume", err, admin.ErrNotFound)
		for range 2 {
			if err := a.Grant(ctx, "pvc-1", admin.Access{Node: "n2", Addrs: []string{"10.0.0.0/8", "::ffff:10.1.2.3"}, ReadOnly: true}); err != nil {
				t.Fatal(err)
			}
			if err := a.Grant(ctx, "pvc-1", admin.Access{Node: "n1", Addrs: []string{"192.168.1.7"}}); err != nil {
				t.Fatal(err)
			}
		}
		v, err := a.GetVolume(ctx, "pvc-1")
		if err != nil {
			t.Fatal(err)
		}
		want := []admin.Access{{Node: "n1", Addrs: []string{"192.168.1.7"}}, {Node: "n2", Addrs: []string{"10.0.0.0/8", "10.1.2.3"}, ReadOnly: true}}
		if !reflect.DeepEqual(v.Access, want) {
			t.Fatalf("access %+v, want %+v", v.Access, want)
		}
		// replacing an entry
		if err := a.Grant(ctx, "pvc-1", admin.Access{Node: "n1", Addrs: []string{"192.168.1.8"}}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := a.Revoke(ctx, "pvc-1", "n2"); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Revoke(ctx, "pvc-1", "never-granted"); err != nil {
			t.Fatal(err)
		}
		wantErr(t, "revoke on an unregistered volume", a.Revoke(ctx, "full/x", "n1"), admin.ErrNotFound)
		v, _ = a.GetVolume(ctx, "pvc-1")
		if want := []admin.Access{{Node: "n1", Addrs: []string{"192.168.1.8"}}}; !reflect.DeepEqual(v.Access, want) {
			t.Fatalf("access %+v, want %+v", v.Access, want)
		}
	})

	t.Run("snapshots", func(t *testing.T) {
		_, err := a.CreateSnapshot(ctx, "s1", "full/x")
		wantErr(t, "unregistered source", err, admin.ErrNotFound)
		for _, bad := range []string{"..", "a/b", "a b", strings.Repeat("x", 129)} {
			_, err = a.CreateSnapshot(ctx, bad, "pvc-1")
			if !errors.Is(err, admin.ErrInvalid) && !errors.Is(err, admin.ErrNotFound) {
				t.Fatalf("id %q: %v", bad, err)
			}
		}
		s1, err := a.CreateSnapshot(ctx, "s1", "pvc-1")
		if err != nil || s1.ID != "s1" || s1.Source != "pvc-1" || s1.CreatedAt.IsZero() || s1.SourceMeta["csi.volumeID"] != "vol-1" {
			t.Fatalf("CreateSnapshot: %+v, %v", s1, err)
		}
		again, err := a.CreateSnapshot(ctx, "s1", "pvc-1")
		if err != nil || !again.CreatedAt.Equal(s1.CreatedAt) {
			t.Fatalf("CreateSnapshot again: %+v, %v", again, err)
		}
		_, err = a.CreateSnapshot(ctx, "s1", "ns/pvc-2")
		wantErr(t, "same id, other source", err, admin.ErrExists)
		s1 = waitSnapshot(t, a, "s1")
		if s1.Error != "" {
			t.Fatal(s1.Error)
		}
		list, err := a.ListSnapshots(ctx)
		if err != nil || len(list) != 1 || list[0].ID != "s1" || !list[0].Ready {
			t.Fatalf("ListSnapshots: %+v, %v", list, err)
		}
		_, err = a.GetSnapshot(ctx, "nope")
		wantErr(t, "GetSnapshot unknown", err, admin.ErrNotFound)
		if err := a.DeleteSnapshot(ctx, "nope"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("clones", func(t *testing.T) {
		_, err := a.CreateClone(ctx, admin.Clone{Dest: "full/x"})
		wantErr(t, "no source", err, admin.ErrInvalid)
		_, err = a.CreateClone(ctx, admin.Clone{Dest: "full/x", FromSnapshot: "s1", FromVolume: "pvc-1"})
		wantErr(t, "two sources", err, admin.ErrInvalid)
		_, err = a.CreateClone(ctx, admin.Clone{Dest: "nodir", FromSnapshot: "s1"})
		wantErr(t, "missing destination", err, admin.ErrPrecondition)
		_, err = a.CreateClone(ctx, admin.Clone{Dest: "full", FromSnapshot: "s1"})
		wantErr(t, "destination not empty", err, admin.ErrPrecondition)
		_, err = a.CreateClone(ctx, admin.Clone{Dest: "full/x", FromSnapshot: "nope"})
		wantErr(t, "unknown snapshot", err, admin.ErrNotFound)
		_, err = a.CreateClone(ctx, admin.Clone{Dest: "full/x", FromVolume: "nope"})
		wantErr(t, "unknown volume", err, admin.ErrNotFound)
		_, err = a.CreateClone(ctx, admin.Clone{Dest: "pvc-1", FromVolume: "pvc-1"})
		wantErr(t, "into itself", err, admin.ErrInvalid)
		c, err := a.CreateClone(ctx, admin.Clone{Dest: "full/x", FromSnapshot: "s1"})
		if err != nil || c.Dest != "full/x" || c.FromSnapshot != "s1" {
			t.Fatalf("CreateClone: %+v, %v", c, err)
		}
		if _, err := a.CreateClone(ctx, admin.Clone{Dest: "full/x", FromSnapshot: "s1"}); err != nil {
			t.Fatal("CreateClone again:", err)
		}
		c = waitClone(t, a, "full/x")
		if c.Error != "" {
			t.Fatal(c.Error)
		}
		_, err = a.CreateClone(ctx, admin.Clone{Dest: "full/x", FromVolume: "ns/pvc-2"})
		wantErr(t, "same destination, other source", err, admin.ErrExists)
		_, err = a.GetClone(ctx, "pvc-1")
		wantErr(t, "GetClone unknown", err, admin.ErrNotFound)
	})

	t.Run("delete", func(t *testing.T) {
		for range 2 {
			if err := a.DeleteVolume(ctx, "ns/pvc-2"); err != nil {
				t.Fatal(err)
			}
		}
		_, err := a.GetVolume(ctx, "ns/pvc-2")
		wantErr(t, "deleted volume", err, admin.ErrNotFound)
		if _, err := os.Stat(filepath.Join(root, "ns/pvc-2")); err != nil {
			t.Fatal("DeleteVolume removed the directory:", err)
		}
		if err := a.DeleteVolume(ctx, "never"); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := a.DeleteSnapshot(ctx, "s1"); err != nil {
				t.Fatal(err)
			}
		}
		_, err = a.GetSnapshot(ctx, "s1")
		wantErr(t, "deleted snapshot", err, admin.ErrNotFound)
	})

	t.Run("wire", func(t *testing.T) {
		for _, c := range []struct {
			method, path, body string
			status             int
			code               string
		}{
			{"PUT", "/v1/volumes/pvc-1", "{", 400, admin.CodeInvalidArgument},
			{"PUT", "/v1/volumes/pvc-1", `{"quotaBytes": "x"}`, 400, admin.CodeInvalidArgument},
			{"PUT", "/v1/volumes/pvc-1", `{} {}`, 400, admin.CodeInvalidArgument},
			{"DELETE", "/v1/access/pvc-1", "", 400, admin.CodeInvalidArgument},
			{"GET", "/v1/nothing", "", 404, admin.CodeNotFound},
			{"PUT", "/v1/clones/full/x", `{"dest": "other", "fromSnapshot": "s"}`, 400, admin.CodeInvalidArgument},
		} {
			req, _ := http.NewRequest(c.method, e.http.URL+c.path, strings.NewReader(c.body))
			req.Header.Set("Authorization", "Bearer "+testAdminToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var eb admin.ErrorBody
			decodeJSON(t, resp, &eb)
			if resp.StatusCode != c.status || eb.Code != c.code || eb.Error == "" {
				t.Fatalf("%s %s %q: %d %+v", c.method, c.path, c.body, resp.StatusCode, eb)
			}
		}
	})
}
