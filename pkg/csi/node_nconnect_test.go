package csi

import (
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// nconnect=N in a StorageClass's mountOptions reaches `driver mount -o`
// beside the pod's whole credit share (the mount divides it among its
// connections); a value out of 1..16 is refused.
func TestNodeSpecNConnect(t *testing.T) {
	n := newNode(Config{NodeName: "n1", NodeAddress: "127.0.0.1", MounterSocket: "/nonexistent"})
	id := volumeID{Server: "10.0.0.5", Share: "/", SubDir: "pvc-1", OnDelete: "delete"}.String()
	req := func(flags ...string) *csipb.NodePublishVolumeRequest {
		vc := mountCap()
		vc.GetMount().MountFlags = flags
		return &csipb.NodePublishVolumeRequest{VolumeId: id, VolumeCapability: vc, VolumeContext: map[string]string{
			ctxCredits: "16", ctxPodName: "web", ctxPodNamespace: "ns1"}}
	}
	sp, err := n.spec(req("proto=rdma", "nconnect=4"))
	if err != nil {
		t.Fatal(err)
	}
	if o := "," + sp.options + ","; !strings.Contains(o, ",nconnect=4,") || !strings.Contains(o, ",credits=16,") {
		t.Errorf("options %q, want nconnect=4 and credits=16", sp.options)
	}
	for _, bad := range []string{"nconnect=0", "nconnect=17"} {
		if _, err := n.spec(req("proto=tcp", bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
