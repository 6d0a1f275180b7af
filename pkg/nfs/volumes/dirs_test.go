package volumes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// TestVolumeDirs makes and disposes of volume directories through the
// admin API, as the CSI controller does without NFS access to the root.
func TestVolumeDirs(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	e := startRegEnv(t, root, state)
	ctx := testenv.Context(t, 30*time.Second)
	a := e.adm

	mode := func(p string) os.FileMode {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode()
	}

	// made with its parents, the mode exact (no umask), idempotent
	for range 2 {
		v, err := a.CreateVolume(ctx, "ns/pvc-1", 1<<20, 0o2777, map[string]string{"id": "x"})
		if err != nil {
			t.Fatal(err)
		}
		if v.Path != "ns/pvc-1" || v.QuotaBytes != 1<<20 || v.Meta["id"] != "x" {
			t.Fatalf("volume %+v", v)
		}
	}
	if m := mode("ns/pvc-1"); m.Perm() != 0o777 || m&os.ModeSetgid == 0 || !m.IsDir() {
		t.Fatalf("volume directory mode %v", m)
	}
	if m := mode("ns"); m.Perm() != 0o755 {
		t.Fatalf("parent mode %v", m)
	}

	// refused: setuid, a symlink on the way, a file in the way, inside a volume
	wantErr(t, "setuid mode", errOf(a.CreateVolume(ctx, "pvc-s", 0, 0o4755, nil)), admin.ErrInvalid)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "through a symlink", errOf(a.CreateVolume(ctx, "link/pvc", 0, 0o777, nil)), admin.ErrPrecondition)
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("made %v outside the root", ents)
	}
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "a file in the way", errOf(a.CreateVolume(ctx, "file/pvc", 0, 0o777, nil)), admin.ErrPrecondition)
	wantErr(t, "inside a volume", errOf(a.CreateVolume(ctx, "ns/pvc-1/sub", 0, 0o777, nil)), admin.ErrPrecondition)
	if _, err := os.Lstat(filepath.Join(root, "ns/pvc-1/sub")); err == nil {
		t.Fatal("made a directory inside another volume")
	}

	// delete: the tree goes, a symlink inside is removed, not followed
	if err := os.MkdirAll(filepath.Join(root, "ns/pvc-1/a/b"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ns/pvc-1/a/b/f"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(outside, "keep")
	if err := os.WriteFile(keep, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "ns/pvc-1/a/out")); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := a.DeleteVolume(ctx, "ns/pvc-1", admin.DirectoryDelete); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "ns/pvc-1")); !os.IsNotExist(err) {
		t.Fatalf("volume directory left: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("followed a symlink out of the volume: %v", err)
	}
	wantErr(t, "deleted volume", errOf(a.GetVolume(ctx, "ns/pvc-1")), admin.ErrNotFound)

	// archive: renamed beside itself; a second archive of the name gets a timestamp
	for i := range 2 {
		if _, err := a.CreateVolume(ctx, "ns/pvc-2", 0, 0o777, nil); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "ns/pvc-2/f"), []byte{byte(i)}, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := a.DeleteVolume(ctx, "ns/pvc-2", admin.DirectoryArchive); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(filepath.Join(root, "ns"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range ents {
		names = append(names, de.Name())
	}
	if len(names) != 2 || names[0] != "archived-pvc-2" || !strings.HasPrefix(names[1], "archived-pvc-2-") {
		t.Fatalf("after two archives: %v", names)
	}

	// retain (the default): the directory stays
	if _, err := a.CreateVolume(ctx, "pvc-3", 0, 0o750, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteVolume(ctx, "pvc-3"); err != nil {
		t.Fatal(err)
	}
	if m := mode("pvc-3"); m.Perm() != 0o750 {
		t.Fatalf("retained directory %v", m)
	}
	wantErr(t, "bad disposal", a.DeleteVolume(ctx, "pvc-3", "shred"), admin.ErrInvalid)

	// a directory holding a volume is not removed
	if _, err := a.CreateVolume(ctx, "ns2/pvc-4", 0, 0o777, nil); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "removing around a volume", e.reg.RemoveVolumeDir("ns2", admin.DirectoryDelete), admin.ErrPrecondition)
	wantErr(t, "removing a registered volume", e.reg.RemoveVolumeDir("ns2/pvc-4", admin.DirectoryDelete), admin.ErrPrecondition)
}

func errOf(_ admin.Volume, err error) error { return err }
