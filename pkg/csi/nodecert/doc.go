// Package nodecert gives each node a client certificate for RPC-with-TLS
// (RFC 9289) through the Kubernetes CertificateSigningRequest API
// (certificates.k8s.io/v1), as kubelet obtains its certificates and
// cert-manager's CSR issuer signs them.
//
// A node's Requester generates an ECDSA P-256 key, asks for a certificate
// naming the node (subject CN and the one DNS subjectAltName both the node
// name, the name the export server grants volumes to: sunrpc.TLSInfo's
// PeerName) with the signer SignerName and usages "digital signature" and
// "client auth", waits for it, writes key and certificate to one PEM file
// at once, and asks again at 2/3 of the certificate's lifetime.
//
// The controller's Controller watches the CSRs of SignerName, approves a
// CSR only when Approver.Decide finds that it was made by the node
// plugin's ServiceAccount with a token bound to a pod on the node it names
// (the API server's own record of the requester, never the request's
// content), signs approved ones with the CA of a Secret (CA) and sets
// status.certificate.
package nodecert
