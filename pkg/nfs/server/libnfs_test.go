package server

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// libnfsTool returns the path of a libnfs-utils tool: skip if missing,
// fail under CI=true.
func libnfsTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (libnfs-utils) is required under CI: %v", name, err)
		}
		t.Skipf("%s (libnfs-utils) not installed: %v", name, err)
	}
	return p
}

func (e *testEnv) url(p string) string {
	_, nport, _ := strings.Cut(e.nfsAddr, ":")
	_, mport, _ := strings.Cut(e.mntAddr, ":")
	return fmt.Sprintf("nfs://127.0.0.1%s?version=3&nfsport=%s&mountport=%s", p, nport, mport)
}

func runTool(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestLibnfs runs the third-party libnfs client against the server:
// byte-exact 64 MiB copies both ways and a 2,000-entry listing.
func TestLibnfs(t *testing.T) {
	cp := libnfsTool(t, "nfs-cp")
	ls := libnfsTool(t, "nfs-ls")
	cat := libnfsTool(t, "nfs-cat")
	root, exps := layout(t)
	env := startServer(t, root, exps)
	local := t.TempDir()

	data := make([]byte, 64<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(data); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			data[i+j] = byte(v >> (8 * j))
		}
	}
	t.Run("copy-from-server", func(t *testing.T) {
		testenv.MustWrite(t, filepath.Join(root, "exp", "big.bin"), data)
		dst := filepath.Join(local, "big.out")
		runTool(t, cp, env.url("/exp/big.bin"), dst)
		got, err := os.ReadFile(dst)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("copy differs (%d bytes, %v)", len(got), err)
		}
	})
	t.Run("copy-to-server", func(t *testing.T) {
		src := filepath.Join(local, "up.bin")
		testenv.MustWrite(t, src, data)
		runTool(t, cp, src, env.url("/exp/up.bin"))
		got, err := os.ReadFile(filepath.Join(root, "exp", "up.bin"))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("copy differs (%d bytes, %v)", len(got), err)
		}
	})
	t.Run("cat", func(t *testing.T) {
		testenv.MustWrite(t, filepath.Join(root, "exp", "small.txt"), []byte("hello libnfs\n"))
		if out := runTool(t, cat, env.url("/exp/small.txt")); out != "hello libnfs\n" {
			t.Fatalf("nfs-cat: %q", out)
		}
	})
	t.Run("list-2000", func(t *testing.T) {
		dir := filepath.Join(root, "exp", "many")
		os.Mkdir(dir, 0o755)
		var want []string
		for i := range 2000 {
			name := fmt.Sprintf("file-%04d.dat", i)
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			want = append(want, name)
		}
		out := runTool(t, ls, env.url("/exp/many"))
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			if name := f[len(f)-1]; name != "." && name != ".." {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("nfs-ls listed %d names, want %d; first lines:\n%s", len(got), len(want), out[:min(len(out), 500)])
		}
	})
	t.Run("acl-denied", func(t *testing.T) {
		exps[0].Clients = nil
		exps[0].ReadOnly = true
		env.srv.SetExports(exps)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, cp, filepath.Join(local, "up.bin"), env.url("/exp/denied.bin")).CombinedOutput()
		if err == nil {
			t.Fatalf("nfs-cp to a read-only export succeeded: %s", out)
		}
	})
}
