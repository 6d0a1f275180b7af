package nodecert

import "strings"

// SignerName is the signerName of the nodes' CSRs
// (CertificateSigningRequest spec.signerName): the controller signs only
// CSRs naming it.
const SignerName = "nfsrdma.csi.dev/node"

// NodeNameExtra is the user-info extra key in which the API server records
// the node of the pod a ServiceAccount token is bound to (Kubernetes 1.30
// and later, ServiceAccountTokenPodNodeInfo); a CSR carries it in
// spec.extra.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// ServiceAccountUser is the user name of the ServiceAccount name in
// namespace ns, as the API server authenticates its tokens
// ("system:serviceaccount:NS:NAME").
func ServiceAccountUser(ns, name string) string {
	return "system:serviceaccount:" + ns + ":" + name
}

// csrNamePrefix is the generateName of a node's CSR: the node name follows.
const csrNamePrefix = "nfsrdma-node-"

// csrGenerateName is the generateName of node's CSRs (object names are
// at most 253 characters, 5 of which the API server appends).
func csrGenerateName(node string) string {
	n := csrNamePrefix + strings.ToLower(node)
	if len(n) > 240 {
		n = n[:240]
	}
	return n + "-"
}
