package plugin

import (
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Kube locates the Kubernetes API: Kubeconfig, else the in-cluster
// configuration; Namespace holds the credit ledger's ConfigMap (and, by
// default, the leader election Lease).
type Kube struct {
	Kubeconfig, Namespace string
}

// client returns an API client with the user agent nfsrdma-csi/VERSION,
// or an error when there is no API to talk to.
func (k Kube) client(version string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if k.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "nfsrdma-csi/" + version
	return kubernetes.NewForConfig(cfg)
}
