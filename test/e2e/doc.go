// Package e2e is the end-to-end test of the driver on a real Kubernetes
// control plane (etcd, kube-apiserver, kube-controller-manager) with the
// real csi-provisioner and csi-attacher sidecars against `driver
// controller` and `driver server`. The test is behind the build tag e2e
// (so that `go test ./...` does not run it); hack/test-k8s builds and
// starts the control plane and runs it:
//
//	go test -tags e2e -count=1 -v ./test/e2e/
//
// It needs KUBECONFIG (skips without it, fails under CI=true) and the
// directory of kubectl, csi-provisioner and csi-attacher in K8S_BIN (else
// they are looked up in PATH).
package e2e
