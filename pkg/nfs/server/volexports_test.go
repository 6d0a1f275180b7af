package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mount3"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/volumes"
)

// TestVolumeExportOverlap checks that a volume and a static export other
// than "/" never overlap, whichever comes second: the registry refuses
// the volume (admin.ErrPrecondition), the server refuses the static
// export, and SetVolumeExports refuses an overlapping volume export even
// when the registry did not ask StaticOverlap first; a refused change
// leaves both tables as they were.
func TestVolumeExportOverlap(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	for _, d := range []string{"static/sub", "vol/x"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e := startVolEnv(t, root, state, false, Export{Path: "/static"})
	for _, p := range []string{"static", "static/sub"} {
		if _, err := e.reg.AddVolume(p, 0, nil); !errors.Is(err, admin.ErrPrecondition) {
			t.Fatalf("AddVolume(%q) inside the static export: %v, want ErrPrecondition", p, err)
		}
	}
	if _, err := e.reg.AddVolume("vol", 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Grant("vol", admin.Access{Node: "n", Addrs: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/vol", "/vol/x"} {
		if err := e.srv.SetExports([]Export{{Path: "/static"}, {Path: p}}); err == nil {
			t.Fatalf("SetExports with %s over the volume: no error", p)
		}
	}
	if got := e.srv.Exports(); len(got) != 1 || got[0].Path != "/static" {
		t.Fatalf("static exports after refused changes: %+v", got)
	}
	if err := e.srv.SetExports([]Export{{Path: "/static"}, {Path: "/"}}); err != nil {
		t.Fatalf("the root beside a volume: %v", err)
	}

	// the exporter checks by itself, under its own lock
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(root, "static", "sub"), &st); err != nil {
		t.Fatal(err)
	}
	vs := []volumes.Export{{Path: "/static/sub", Dev: st.Dev, Ino: st.Ino}}
	if err := e.srv.SetVolumeExports(vs); err == nil {
		t.Fatal("SetVolumeExports over a static export: no error")
	}
	// the volume export is still installed
	mc := e.rpcClient(t, true)
	if _, s := mnt(t, mc, "/vol"); s != mount3.OK {
		t.Fatalf("MNT /vol after a refused SetVolumeExports: %v", s)
	}
	if _, s := mnt(t, mc, "/static/sub"); s != mount3.OK { // a directory of the static export
		t.Fatalf("MNT /static/sub: %v", s)
	}

	// a volume whose directory is missing at start is not exported, but
	// still keeps static exports away
	if err := os.MkdirAll(filepath.Join(root, "a", "gone"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.AddVolume("a/gone", 0, nil); err != nil {
		t.Fatal(err)
	}
	e.stop()
	if err := os.Remove(filepath.Join(root, "a", "gone")); err != nil {
		t.Fatal(err)
	}
	e = startVolEnv(t, root, state, false, Export{Path: "/static"})
	if err := e.srv.SetExports([]Export{{Path: "/a"}}); err == nil {
		t.Fatal("SetExports over a volume whose directory is missing: no error")
	}
	if err := os.Mkdir(filepath.Join(root, "a", "gone"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.AddVolume("a/gone", 0, nil); err != nil {
		t.Fatalf("AddVolume of the directory back: %v", err)
	}
}

// TestVolumeExportsConcurrent runs registry changes (each installing
// the volume exports under the registry's lock, then the server's)
// against static export changes and MNT calls: with the locks always
// taken registry first, nothing deadlocks, and every volume ends
// exported as registered.
func TestVolumeExportsConcurrent(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	const n = 8
	for i := range n {
		if err := os.MkdirAll(filepath.Join(root, fmt.Sprintf("vol%d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "static"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := startVolEnv(t, root, state, false)
	mc := e.rpcClient(t, true)
	done := make(chan struct{})
	var wg, workers sync.WaitGroup
	for i := range n {
		workers.Go(func() {
			p := fmt.Sprintf("vol%d", i)
			for j := range 20 {
				if _, err := e.reg.AddVolume(p, int64(j+1)<<20, nil); err != nil {
					t.Error(err)
					return
				}
				if err := e.reg.Grant(p, admin.Access{Node: "n", Addrs: []string{"127.0.0.1"}}); err != nil {
					t.Error(err)
					return
				}
				if j%5 == 2 {
					if err := e.reg.RemoveVolume(p); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for j := 0; ; j++ {
			select {
			case <-done:
				return
			default:
			}
			exps := []Export{{Path: "/static"}}
			if j%2 == 1 {
				exps = nil
			}
			if err := e.srv.SetExports(exps); err != nil {
				t.Error(err)
				return
			}
			e.reg.Volumes()
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			mnt(t, mc, "/vol0")
		}
	})
	finished := make(chan struct{})
	go func() { workers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(time.Minute):
		t.Fatal("registry and server changes did not end within a minute (deadlock?)")
	}
	close(done)
	wg.Wait()
	if vs := e.reg.Volumes(); len(vs) != n {
		t.Fatalf("%d volumes registered, want %d", len(vs), n)
	}
	for i := range n {
		if _, s := mnt(t, mc, fmt.Sprintf("/vol%d", i)); s != mount3.OK {
			t.Fatalf("MNT /vol%d: %v", i, s)
		}
	}
}
