package csi

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
)

// TestSanity runs csi-test's sanity suite against the real controller,
// node, mounter and export server processes: every group of the
// capabilities we advertise, with real FUSE mounts over NFS on
// RPC-over-RDMA.
func TestSanity(t *testing.T) {
	e := newEnv(t)
	e.startAll()
	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + e.nodeSock
	cfg.ControllerAddress = "unix://" + e.ctrlSock
	cfg.TargetPath = filepath.Join(e.targetRoot, "pods", "target")
	cfg.StagingPath = filepath.Join(e.targetRoot, "staging")
	cfg.TestVolumeParameters = map[string]string{ParamServer: "127.0.0.1"}
	cfg.TestVolumeSize = 8 << 20
	cfg.TestVolumeExpandSize = 16 << 20
	cfg.IdempotentCount = 2
	cfg.CreateTargetDir = func(p string) (string, error) { return p, os.MkdirAll(p, 0o755) }
	cfg.CreateStagingDir = cfg.CreateTargetDir
	cfg.CheckPath = func(p string) (sanity.PathKind, error) {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return sanity.PathIsNotFound, nil
		case err != nil:
			return "", err
		case fi.IsDir():
			return sanity.PathIsDir, nil
		case fi.Mode().IsRegular():
			return sanity.PathIsFile, nil
		}
		return sanity.PathIsOther, nil
	}
	sanity.Test(t, cfg)
}
