package exportd

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
)

// testVolume is a volume a test serves: its directory under the root and
// the access granted to it.
type testVolume struct {
	path string
	acc  admin.Access
}

// serveVolumes makes each volume's directory under cfg.Root (mode 0777),
// serves cfg with the volumes registered and granted until t ends, and
// returns the server.
func serveVolumes(t testing.TB, cfg Config, vols ...testVolume) *Server {
	t.Helper()
	for _, v := range vols {
		if err := os.Mkdir(filepath.Join(cfg.Root, v.path), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	for _, v := range vols {
		if _, err := s.Registry().AddVolume(v.path, 0, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Registry().Grant(v.path, v.acc); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("the export server did not stop")
		}
	})
	return s
}
