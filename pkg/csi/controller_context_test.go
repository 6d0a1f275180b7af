package csi

import "testing"

// TestVolumeContextMountOptions: the mount options a volume's context
// gives the node: the transport's port, MOUNT's port and, when the
// controller knows the servers' NLM port, lockport= so that mounts find the
// lock service without the server's rpcbind (a server in a pod has none).
func TestVolumeContextMountOptions(t *testing.T) {
	id := volumeID{Server: "srv", Share: "/", SubDir: "v1", OnDelete: "delete"}
	for _, tc := range []struct {
		ports     ServerPorts
		transport string
		want      string
	}{
		{ServerPorts{NFS: 2049, RDMA: 20049, Mount: 20048, NLM: 4045}, "rdma", "proto=rdma,port=20049,mountport=20048,lockport=4045"},
		{ServerPorts{NFS: 2049, RDMA: 20049, Mount: 20048, NLM: 4045}, "tcp", "proto=tcp,port=2049,mountport=20048,lockport=4045"},
		{ServerPorts{NFS: 2049, RDMA: 20049, Mount: 20048}, "rdma", "proto=rdma,port=20049,mountport=20048"},
	} {
		c := &controller{cfg: Config{Ports: tc.ports}}
		got := c.volumeContext(id, volumeParams{Transport: tc.transport, CreditsPerPod: 16})[ctxMountOptions]
		if got != tc.want {
			t.Errorf("ports %+v, %s: mount options %q, want %q", tc.ports, tc.transport, got, tc.want)
		}
	}
}
