//go:build node

package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serverTLSSecret is the Secret of the export server's certificate this
// step makes (tls.crt, tls.key, ca.crt), as cert-manager would.
const serverTLSSecret = "nfsrdma-server-tls"

// nodeCertificates: the chart installed anew with nodeCertificates.enabled
// and the export server's RPC-with-TLS (RFC 9289) in mode optional, after
// the other steps uninstalled it. Every node's plugin
// gets a certificate naming its node through a CSR that the controller
// approves and signs; a claim of a StorageClass with xprtsec=mtls mounts
// on a worker over TLS 1.3, the server naming the worker from its
// certificate; after the other worker's name is put on the revocation
// list, its mount of the same claim is refused at the TLS handshake. The
// chart is uninstalled again at the end.
func (c *cluster) nodeCertificates(t *testing.T) {
	if !c.multiNode() {
		t.Skip("needs two worker nodes (hack/cluster up --nodes 3)")
	}
	w := c.workers()
	dir := filepath.Join(c.dir, "node-certificates")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	// the export server's certificate, for the name the StorageClass gives
	// the name the chart's StorageClass gives mounts (the server's Service)
	server := release + "-server." + ns + ".svc.cluster.local"
	writeServerCert(t, dir, server)
	sh(t, "kubectl create namespace "+ns+" --dry-run=client -o yaml | kubectl apply -f -")
	sh(t, "kubectl -n "+ns+" create secret generic "+serverTLSSecret+" --from-file=tls.crt="+dir+"/tls.crt --from-file=tls.key="+dir+"/tls.key --from-file=ca.crt="+dir+"/ca.crt")
	values := filepath.Join(dir, "values.yaml")
	install := func(verb, revoked string) {
		t.Helper()
		v := "nodeCertificates:\n  enabled: true\n"
		if revoked != "" {
			v += "  revoked:\n    names: [" + revoked + "]\n"
		}
		v += "server:\n  tls:\n    secretName: " + serverTLSSecret + "\n    mode: optional\n"
		if err := os.WriteFile(values, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		sh(t, "cat "+values)
		sh(t, "helm "+verb+" "+release+" "+chartPath+" --namespace "+ns+" -f "+c.values+" -f "+values+" --wait --timeout 5m")
	}
	t.Cleanup(func() {
		quiet("kubectl -n " + apps + " delete pod mtls-a mtls-b --wait=true --timeout=120s")
		quiet("kubectl -n " + apps + " delete pvc mtls --wait=true --timeout=120s")
		quiet("kubectl delete storageclass nfsrdma-mtls --ignore-not-found")
		try(t, "helm uninstall "+release+" --namespace "+ns+" --wait --timeout 3m")
		// the CA the controller made, and the server's certificate
		quiet("kubectl -n " + ns + " delete secret " + release + "-node-ca " + serverTLSSecret + " --ignore-not-found")
		quiet("kubectl delete csr --field-selector spec.signerName=nfsrdma.csi.dev/node")
	})
	// a new install: every pod starts with the node certificate's flags;
	// --wait: every pod Ready
	install("install", "")

	// every node's plugin asked for its certificate, approved and issued
	for _, n := range c.allNodes() {
		waitOut(t, 2*time.Minute, "CSR of node "+n+" approved and issued",
			"kubectl get csr --field-selector spec.signerName=nfsrdma.csi.dev/node -o json", func(o string) bool { return csrIssued(o, n) })
	}
	sh(t, "kubectl get csr -o wide")

	// a StorageClass like the chart's, with xprtsec=mtls over TCP
	var sc struct {
		Parameters map[string]string `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(sh(t, "kubectl get storageclass nfsrdma -o json")), &sc); err != nil {
		t.Fatal(err)
	}
	params := ""
	for k, v := range sc.Parameters {
		if k == "transport" {
			v = "tcp"
		}
		params += "  " + k + ": " + quote(v) + "\n"
	}
	apply(t, `
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: nfsrdma-mtls
provisioner: `+driver+`
reclaimPolicy: Delete
mountOptions: [xprtsec=mtls]
parameters:
`+params)
	sh(t, "kubectl create namespace "+apps+" --dry-run=client -o yaml | kubectl apply -f -")
	apply(t, pvc("mtls", "nfsrdma-mtls", "1Gi", "ReadWriteMany", ""))
	apply(t, podOn("mtls-a", "mtls", w[0], busybox))
	sh(t, "kubectl -n "+apps+" wait --for=condition=Ready pod/mtls-a --timeout=180s")
	sh(t, "kubectl -n "+apps+" exec mtls-a -- sh -c 'echo over-mtls > /data/f && cat /data/f'")
	procs := c.nodeProcs(w[0], func(a []string) bool { return isMount(a) && strings.Contains(strings.Join(a, " "), "xprtsec=mtls") })
	if len(procs) == 0 {
		t.Errorf("no mount process with xprtsec=mtls on %s", w[0])
	}
	logs := sh(t, "kubectl -n "+ns+" logs "+serverPod+" -c server | grep -F 'RPC-with-TLS session' | tail -5")
	if !strings.Contains(logs, `client="`+w[0]+`" verified=true version="TLS 1.3"`) {
		t.Errorf("the server logged no verified TLS 1.3 session of %s", w[0])
	}

	// revoke the other worker: its mount of the same claim is refused at
	// the handshake (the list reaches the server pod by its ConfigMap)
	install("upgrade", w[1]) // only the revocation ConfigMap changes
	uid := strings.TrimSpace(sh(t, "kubectl -n "+ns+" get pod "+serverPod+" -o jsonpath='{.metadata.uid}'"))
	list := "/var/lib/kubelet/pods/" + uid + "/volumes/kubernetes.io~configmap/revoked/revoked"
	serverNode := strings.TrimSpace(sh(t, "kubectl -n "+ns+" get pod "+serverPod+" -o jsonpath='{.spec.nodeName}'"))
	waitOut(t, 3*time.Minute, "the revocation list in the server pod names "+w[1], c.onNode(serverNode, "cat "+list), func(o string) bool {
		return strings.Contains(o, "name "+w[1])
	})
	apply(t, podOn("mtls-b", "mtls", w[1], busybox))
	waitOut(t, 2*time.Minute, "mtls-b's mount refused at the handshake",
		"kubectl -n "+apps+" get events --field-selector involvedObject.name=mtls-b,reason=FailedMount -o jsonpath='{.items[*].message}'",
		func(o string) bool { return strings.Contains(o, "handshake failed") })
	if out := sh(t, "kubectl -n "+apps+" get pod mtls-b -o jsonpath='{.status.phase}'"); strings.TrimSpace(out) == "Running" {
		t.Errorf("pod mtls-b on %s runs with a revoked certificate", w[1])
	}
	waitOut(t, time.Minute, "the server logs the revoked certificate of "+w[1],
		"kubectl -n "+ns+" logs "+serverPod+" -c server", func(o string) bool {
			return strings.Contains(o, `certificate revoked: name \"`+w[1]+`\"`)
		})
	// the node not revoked still works
	sh(t, "kubectl -n "+apps+" exec mtls-a -- sh -c 'echo again >> /data/f && cat /data/f'")
}

// csrIssued reports whether the CSR list o (kubectl -o json) holds an
// approved CSR with a certificate whose request names node.
func csrIssued(o, node string) bool {
	var l struct {
		Items []struct {
			Spec struct {
				Request []byte `json:"request"`
			} `json:"spec"`
			Status struct {
				Certificate []byte `json:"certificate"`
				Conditions  []struct {
					Type string `json:"type"`
				} `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	if json.Unmarshal([]byte(o), &l) != nil {
		return false
	}
	for _, it := range l.Items {
		b, _ := pem.Decode(it.Spec.Request)
		if b == nil {
			continue
		}
		r, err := x509.ParseCertificateRequest(b.Bytes)
		if err != nil || r.Subject.CommonName != node || len(it.Status.Certificate) == 0 {
			continue
		}
		for _, c := range it.Status.Conditions {
			if c.Type == "Approved" {
				return true
			}
		}
	}
	return false
}

// writeServerCert writes ca.crt, and tls.crt and tls.key of a server
// certificate for name signed by it, into dir (valid one day).
func writeServerCert(t *testing.T, dir, name string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nfsrdma test server CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range map[string]*pem.Block{
		"ca.crt":  {Type: "CERTIFICATE", Bytes: caDER},
		"tls.crt": {Type: "CERTIFICATE", Bytes: der},
		"tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, f), pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
