package csi

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
)

// TestEphemeralSpec: an inline volume's attributes give the mount's source
// and options; mountOptions reach `driver mount -o` (a server without
// rpcbind needs mountport=), and bad ones are refused before any mount.
func TestEphemeralSpec(t *testing.T) {
	n := &node{cfg: Config{NodeName: "n1"}}
	mount := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	req := func(vc map[string]string) *csipb.NodePublishVolumeRequest {
		vc[ctxEphemeral] = "true"
		vc[ctxPodName], vc[ctxPodNamespace] = "p", "ns"
		return &csipb.NodePublishVolumeRequest{VolumeId: "csi-1", VolumeCapability: mount, VolumeContext: vc}
	}
	for _, tc := range []struct {
		vc           map[string]string
		source, opts string
		rdma         bool
	}{
		{map[string]string{"server": "srv", "share": "/"}, "srv:/", "", false},
		{map[string]string{"server": "srv", "share": "/", "transport": "rdma"}, "srv:/", "proto=rdma,credits=16", true},
		{map[string]string{"server": "srv", "share": "/e", "subDir": "a/b", "transport": "tcp", "mountOptions": "mountport=20048"},
			"srv:/e/a/b", "proto=tcp,mountport=20048", false},
		{map[string]string{"server": "srv", "transport": "rdma", "mountOptions": "mountport=20048,actimeo=1"}, "srv:/",
			"proto=rdma,mountport=20048,actimeo=1,credits=16", true},
	} {
		s, err := n.spec(req(tc.vc))
		if err != nil {
			t.Errorf("%v: %v", tc.vc, err)
			continue
		}
		if s.source != tc.source || s.options != tc.opts || s.rdma != tc.rdma || s.machine != "n1/ns/p" {
			t.Errorf("%v: source %q options %q rdma %v machine %q, want %q %q %v n1/ns/p", tc.vc, s.source, s.options, s.rdma, s.machine, tc.source, tc.opts, tc.rdma)
		}
	}
	for _, vc := range []map[string]string{
		{"server": "srv", "mountOptions": "mountport=x"},
		{"server": "srv", "mountOptions": "bogus"},
		{"share": "/"},
		{"server": "srv", "subDir": "../x"},
	} {
		if _, err := n.spec(req(vc)); err == nil {
			t.Errorf("%v: accepted", vc)
		} else if vc["mountOptions"] != "" && !errors.Is(err, mountopts.ErrBadOption) {
			t.Errorf("%v: %v, want a bad mount option", vc, err)
		}
	}
}

// TestProbeWithKeeper: a node plugin keeping the mounts' connections is
// ready (live) while its mounter does not answer, so that its liveness
// probe never restarts it and lets the connections go; without a keeper
// it is not ready then.
func TestProbeWithKeeper(t *testing.T) {
	ctx := testenv.Context(t, 30*time.Second)
	gone := filepath.Join(t.TempDir(), "mounter.sock")
	cfg := Config{MounterSocket: gone}
	if err := newNode(cfg).probe(ctx); err == nil {
		t.Fatal("probe without a keeper and without a mounter: ready")
	}
	cfg.KeeperSocket = filepath.Join(t.TempDir(), "keeper.sock")
	if err := newNode(cfg).probe(ctx); err != nil {
		t.Fatalf("probe with a keeper, without a mounter: %v", err)
	}
}
