package csi

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/credits"
)

// TestLedgerCredits: the pod's mount asks for the ledger's grant (after
// any option the pod set), a refused pod is ResourceExhausted, and
// without an entry the StorageClass's share stands.
func TestLedgerCredits(t *testing.T) {
	entry := func(pod string, granted int) string {
		b, _ := json.Marshal(credits.Entry{Pod: "ns1/" + pod, Server: "10.0.0.5", Desired: 16, Granted: granted})
		return string(b)
	}
	c := fake.NewSimpleClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "csi", Name: credits.DefaultName},
		Data: map[string]string{"ns1.web": entry("web", 6), "ns1.starved": entry("starved", 0)}})
	n := newNode(Config{NodeName: "n1", NodeAddress: "127.0.0.1", MounterSocket: "/nonexistent",
		Kube: c, LedgerNamespace: "csi", LedgerName: credits.DefaultName, LedgerWait: 300 * time.Millisecond})
	id := volumeID{Server: "10.0.0.5", Share: "/", SubDir: "pvc-1", OnDelete: "delete"}.String()
	req := func(pod string) *csipb.NodePublishVolumeRequest {
		vc := mountCap()
		vc.GetMount().MountFlags = []string{"proto=rdma", "credits=64"}
		return &csipb.NodePublishVolumeRequest{VolumeId: id, VolumeCapability: vc, VolumeContext: map[string]string{
			ctxCredits: "16", ctxPodName: pod, ctxPodNamespace: "ns1"}}
	}
	for _, tc := range []struct {
		pod, suffix string
		code        codes.Code
	}{
		{"web", ",credits=6", codes.OK},
		{"starved", "", codes.ResourceExhausted},
		{"unknown", "credits=64", codes.OK},
	} {
		r := req(tc.pod)
		sp, err := n.spec(r)
		if err != nil {
			t.Fatal(err)
		}
		err = n.ledgerCredits(context.Background(), r, &sp)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.pod, err, tc.code)
		}
		if err == nil && (len(sp.options) < len(tc.suffix) || sp.options[len(sp.options)-len(tc.suffix):] != tc.suffix) {
			t.Errorf("%s: options %q, want them to end with %q", tc.pod, sp.options, tc.suffix)
		}
	}
}
