//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/cert"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testpki"
	"github.com/nfsrdma/nfsrdma-csi/pkg/csi/nodecert"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/admin"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/client"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/exportd"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/mountopts"
	"github.com/nfsrdma/nfsrdma-csi/pkg/nfs/transport"
	"github.com/nfsrdma/nfsrdma-csi/pkg/sunrpc"
)

const (
	certNamespace = "nfsrdma-e2e-certs"
	nodeSA        = "nfsrdma-csi-node"
	controllerSA  = "nfsrdma-csi-controller"
	caSecret      = "nfsrdma-node-ca"
	certNodeA     = "cert-node-a"
	certNodeB     = "cert-node-b"
)

// TestNodeCertificates: node certificates through the real API server.
// The node plugin's ServiceAccount, with a token bound to a pod on node A
// (TokenRequest: the API server records the pod's node in the token), asks
// for A's certificate; `driver controller --node-ca-secret` makes the CA
// Secret, approves and signs; the certificate verifies against the CA and
// names A. The same token asking for B's name, and the cluster admin
// asking for A's, are denied. Then an export server with the CA as its
// client CA grants A's volume to A's certificate over RPC-with-TLS, and
// refuses at the handshake that certificate once revoked, and an expired
// one of the same CA; a requester started on the expired one replaces it.
func TestNodeCertificates(t *testing.T) {
	testenv.NeedRoot(t, "the export server (name_to_handle_at, open_by_handle_at)")
	e := newEnv(t)
	t.Cleanup(func() {
		e.stop("certsigner")
		if t.Failed() {
			t.Logf("---- certsigner log (tail) ----\n%s", e.logOf("certsigner"))
		}
		if !t.Failed() && os.Getenv("E2E_KEEP") == "" {
			os.RemoveAll(e.dir)
		}
	})
	ctx := testenv.Context(t, 5*time.Minute)
	cs := e.cs
	setupNodeIdentity(t, ctx, cs)

	// the controller, as the chart runs it (no CSI sidecars needed), with
	// the chart's rights only
	sock := filepath.Join(e.dir, "certsigner.sock")
	e.start("certsigner", func() bool { _, err := os.Stat(sock); return err == nil }, e.bin, "controller",
		"--endpoint=unix://"+sock, "--kubeconfig="+controllerKubeconfig(t, ctx, e, cs), "--namespace="+certNamespace, "--credit-ledger=false",
		"--node-ca-secret="+caSecret, "--node-service-account="+nodeSA, "--node-cert-validity=2h")

	nodeA := nodeClient(t, ctx, e, cs, "node-plugin-a")
	dir := e.dir
	fileA := filepath.Join(dir, "node-a", "node.pem")
	var crtA *x509.Certificate
	t.Run("node requests, controller approves and signs", func(t *testing.T) {
		r := &nodecert.Requester{Client: nodeA, NodeName: certNodeA, File: fileA, Timeout: time.Minute}
		var err error
		if crtA, err = r.Request(ctx); err != nil {
			t.Fatal(err)
		}
		ca := caFromSecret(t, ctx, cs)
		roots := x509.NewCertPool()
		roots.AddCert(ca.Cert)
		if _, err := crtA.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("certificate does not verify against the CA Secret's: %v", err)
		}
		if crtA.Subject.CommonName != certNodeA || !slices.Equal(crtA.DNSNames, []string{certNodeA}) {
			t.Fatalf("certificate names CN %q, DNS %q; want %s", crtA.Subject.CommonName, crtA.DNSNames, certNodeA)
		}
		if d := crtA.NotAfter.Sub(crtA.NotBefore); d < 2*time.Hour || d > 2*time.Hour+10*time.Minute {
			t.Fatalf("lifetime %v, want the controller's 2h", d)
		}
		if _, err := r.Current(time.Now()); err != nil {
			t.Fatalf("the file does not hold the certificate: %v", err)
		}
		csr := csrFor(t, ctx, cs, certNodeA)
		if csr.Spec.Username != nodecert.ServiceAccountUser(certNamespace, nodeSA) || !hasCond(csr, certv1.CertificateApproved) {
			t.Fatalf("CSR %s by %q, conditions %+v", csr.Name, csr.Spec.Username, csr.Status.Conditions)
		}
	})

	t.Run("another node's name is denied", func(t *testing.T) {
		r := &nodecert.Requester{Client: nodeA, NodeName: certNodeB, File: filepath.Join(dir, "node-b", "node.pem"), Timeout: time.Minute}
		if _, err := r.Request(ctx); err == nil || !strings.Contains(err.Error(), "denied") {
			t.Fatalf("node A's token got node B's certificate: %v", err)
		}
		csr := csrFor(t, ctx, cs, certNodeB)
		if !hasCond(csr, certv1.CertificateDenied) || hasCond(csr, certv1.CertificateApproved) || len(csr.Status.Certificate) != 0 {
			t.Fatalf("CSR %s for B by A: conditions %+v, certificate %d bytes", csr.Name, csr.Status.Conditions, len(csr.Status.Certificate))
		}
		if _, err := os.Stat(r.File); err == nil {
			t.Fatal("a certificate file was written for B")
		}
		// the cluster admin is not the node plugin either
		r = &nodecert.Requester{Client: cs, NodeName: certNodeA, File: filepath.Join(dir, "admin", "node.pem"), Timeout: time.Minute}
		if _, err := r.Request(ctx); err == nil || !strings.Contains(err.Error(), "denied") {
			t.Fatalf("a user that is not the node plugin got A's certificate: %v", err)
		}
	})
	if crtA == nil {
		t.Fatal("no certificate for node A")
	}

	t.Run("export server: granted, then revoked and expired refused at the handshake", func(t *testing.T) {
		caFile := filepath.Join(dir, "node-ca.pem")
		ca := caFromSecret(t, ctx, cs)
		if err := os.WriteFile(caFile, ca.PEM, 0o644); err != nil {
			t.Fatal(err)
		}
		revoked := filepath.Join(dir, "revoked")
		writeRevoked(t, revoked, "# none\n")
		srvCA, srvCert, srvKey := serverCertificate(t, dir)
		tlsCfg, err := exportd.LoadTLS(srvCert, srvKey, caFile, revoked)
		if err != nil {
			t.Fatal(err)
		}
		ports := startExportServer(t, ctx, tlsCfg)
		mount := func(certFile string) error {
			o, err := mountopts.Parse("proto=tcp,soft,retrans=1,xprtsec=mtls")
			if err != nil {
				t.Fatal(err)
			}
			// one file holds key and certificate, as the requester writes it
			tcp, err := transport.TCPForMount("127.0.0.1", o, transport.TLSFiles{CA: srvCA, Cert: certFile, Key: certFile})
			if err != nil {
				t.Fatal(err)
			}
			mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			c, err := client.Mount(mctx, client.Options{Server: "127.0.0.1", NFSPort: ports.NFS, MountPort: ports.Mount, Export: "/vol",
				AuthSys: sunrpc.AuthSysParams{MachineName: "e2e"}, Retry: sunrpc.RetryPolicy{Soft: true, Retries: 1, Timeout: 5 * time.Second}, TCP: tcp})
			if err == nil {
				_, err = c.Getattr(mctx, c.Root())
				c.Close()
			}
			return err
		}
		if err := mount(fileA); err != nil {
			t.Fatalf("node A's certificate does not mount A's volume: %v", err)
		}
		writeRevoked(t, revoked, "serial "+nodecert.SerialHex(crtA.SerialNumber)+"\n")
		if err := mount(fileA); !errors.Is(err, sunrpc.ErrTLSHandshake) {
			t.Fatalf("revoked certificate: %v, want ErrTLSHandshake", err)
		}
		writeRevoked(t, revoked, "")

		// an expired certificate of the same CA, for the same node
		expired := filepath.Join(dir, "expired", "node.pem")
		writeExpired(t, ca, expired)
		if err := mount(expired); !errors.Is(err, sunrpc.ErrTLSHandshake) {
			t.Fatalf("expired certificate: %v, want ErrTLSHandshake", err)
		}
		// a requester finding it due asks for a new one at once
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		r := &nodecert.Requester{Client: nodeA, NodeName: certNodeA, File: expired, Timeout: time.Minute, RetryInterval: time.Second}
		go func() { done <- r.Run(rctx) }()
		waitFor(t, 90*time.Second, "the expired certificate replaced", func(context.Context) (bool, string, error) {
			_, err := r.Current(time.Now())
			return err == nil, errString(err), nil
		})
		cancel()
		<-done
		if err := mount(expired); err != nil {
			t.Fatalf("renewed certificate: %v", err)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// setupNodeIdentity makes the namespace, the node plugin's ServiceAccount
// with the chart's CSR rights, the two nodes and, on each, a pod of the
// node plugin (never run: there is no kubelet; the pod is what tokens are
// bound to).
func setupNodeIdentity(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	mustCreate(t, "namespace", ignoreExists(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: certNamespace}}, metav1.CreateOptions{})))
	mustCreate(t, "serviceaccount", ignoreExists(cs.CoreV1().ServiceAccounts(certNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: nodeSA}}, metav1.CreateOptions{})))
	role := "nfsrdma-e2e-node-csr"
	mustCreate(t, "clusterrole", ignoreExists(cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"create", "get", "list", "watch"}}}},
		metav1.CreateOptions{})))
	mustCreate(t, "clusterrolebinding", ignoreExists(cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: nodeSA, Namespace: certNamespace}}}, metav1.CreateOptions{})))
	// the controller's rights with nodeCertificates.enabled, as
	// deploy/helm/nfsrdma-csi/templates/rbac-controller.yaml grants them
	ctrlRole := "nfsrdma-e2e-controller-csr"
	mustCreate(t, "serviceaccount", ignoreExists(cs.CoreV1().ServiceAccounts(certNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: controllerSA}}, metav1.CreateOptions{})))
	mustCreate(t, "clusterrole", ignoreExists(cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ctrlRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests/approval", "certificatesigningrequests/status"}, Verbs: []string{"update"}},
			{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"}, ResourceNames: []string{nodecert.SignerName}, Verbs: []string{"approve", "sign"}},
		}}, metav1.CreateOptions{})))
	mustCreate(t, "clusterrolebinding", ignoreExists(cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ctrlRole},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: ctrlRole},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: controllerSA, Namespace: certNamespace}}}, metav1.CreateOptions{})))
	mustCreate(t, "role", ignoreExists(cs.RbacV1().Roles(certNamespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: ctrlRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{caSecret}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		}}, metav1.CreateOptions{})))
	mustCreate(t, "rolebinding", ignoreExists(cs.RbacV1().RoleBindings(certNamespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ctrlRole},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: ctrlRole},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: controllerSA, Namespace: certNamespace}}}, metav1.CreateOptions{})))
	for _, n := range []struct{ node, pod string }{{certNodeA, "node-plugin-a"}, {certNodeB, "node-plugin-b"}} {
		mustCreate(t, "node", ignoreExists(cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.node}}, metav1.CreateOptions{})))
		mustCreate(t, "pod", ignoreExists(cs.CoreV1().Pods(certNamespace).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: n.pod},
			Spec: corev1.PodSpec{NodeName: n.node, ServiceAccountName: nodeSA,
				Containers: []corev1.Container{{Name: "node", Image: "nfsrdma-csi:e2e"}}}}, metav1.CreateOptions{})))
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = cs.CoreV1().Namespaces().Delete(ctx, certNamespace, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, role, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoles().Delete(ctx, role, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, ctrlRole, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoles().Delete(ctx, ctrlRole, metav1.DeleteOptions{})
		for _, n := range []string{certNodeA, certNodeB} {
			_ = cs.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
		}
	})
}

// controllerKubeconfig writes a kubeconfig of the controller's
// ServiceAccount (a TokenRequest token) and returns its path.
func controllerKubeconfig(t *testing.T, ctx context.Context, e *env, cs kubernetes.Interface) string {
	t.Helper()
	tr, err := cs.CoreV1().ServiceAccounts(certNamespace).CreateToken(ctx, controllerSA, &authv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kc := cfg.DeepCopy()
	cur := kc.Contexts[kc.CurrentContext]
	kc.AuthInfos = map[string]*clientcmdapi.AuthInfo{"controller": {Token: tr.Status.Token}}
	cur.AuthInfo = "controller"
	file := filepath.Join(e.dir, "controller.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, file); err != nil {
		t.Fatal(err)
	}
	return file
}

// ignoreExists returns err unless it says the object exists (a rerun).
func ignoreExists[T any](_ T, err error) error {
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	return err
}

// nodeClient is an API client authenticated as the node plugin's
// ServiceAccount with a token bound to pod (TokenRequest), as kubelet
// projects it into the pod.
func nodeClient(t *testing.T, ctx context.Context, e *env, cs kubernetes.Interface, pod string) kubernetes.Interface {
	t.Helper()
	p, err := cs.CoreV1().Pods(certNamespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(certNamespace).CreateToken(ctx, nodeSA, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: admin.Host, BearerToken: tr.Status.Token, Timeout: 30 * time.Second,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData, CAFile: admin.CAFile, Insecure: admin.Insecure}}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// the API server recorded the pod's node in the token
	rv, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := rv.Status.UserInfo.Extra[nodecert.NodeNameExtra]; len(got) != 1 || got[0] != p.Spec.NodeName {
		t.Fatalf("token bound to %s: user %q, %s %q; want %s", pod, rv.Status.UserInfo.Username, nodecert.NodeNameExtra, got, p.Spec.NodeName)
	}
	return c
}

// csrFor returns the newest CSR of nodecert.SignerName asking for node.
func csrFor(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string) *certv1.CertificateSigningRequest {
	t.Helper()
	l, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{FieldSelector: "spec.signerName=" + nodecert.SignerName})
	if err != nil {
		t.Fatal(err)
	}
	var newest *certv1.CertificateSigningRequest
	for i := range l.Items {
		c := &l.Items[i]
		b, _ := pem.Decode(c.Spec.Request)
		if b == nil {
			continue
		}
		r, err := x509.ParseCertificateRequest(b.Bytes)
		if err != nil || r.Subject.CommonName != node {
			continue
		}
		if newest == nil || !c.CreationTimestamp.Before(&newest.CreationTimestamp) {
			newest = c
		}
	}
	if newest == nil {
		t.Fatalf("no CSR for %s", node)
	}
	return newest
}

func hasCond(c *certv1.CertificateSigningRequest, typ certv1.RequestConditionType) bool {
	for _, x := range c.Status.Conditions {
		if x.Type == typ && x.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func caFromSecret(t *testing.T, ctx context.Context, cs kubernetes.Interface) *nodecert.CA {
	t.Helper()
	ca, err := nodecert.SecretCA{Client: cs, Namespace: certNamespace, Name: caSecret}.CA(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func writeRevoked(t *testing.T, file, text string) {
	t.Helper()
	if err := os.WriteFile(file+".new", []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		t.Fatal(err)
	}
}

// writeExpired writes to file a key and a certificate for node A signed by
// ca that ended an hour ago.
func writeExpired(t *testing.T, ca *nodecert.CA, file string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csrPEM, err := cert.MakeCSR(key, &pkix.Name{CommonName: certNodeA}, []string{certNodeA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	req, err := nodecert.ParseRequest(csrPEM)
	if err != nil {
		t.Fatal(err)
	}
	crt, err := ca.Sign(req, certNodeA, time.Hour, time.Now().Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), crt...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serverCertificate makes the export server's CA and certificate (for
// 127.0.0.1) and returns their files.
func serverCertificate(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	ca := testpki.New(t, dir, "e2e-server")
	certFile, keyFile = ca.Issue(t, "e2e-export-server", []net.IP{net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth,
		time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	return ca.File, certFile, keyFile
}

// startExportServer serves a volume "vol" granted to node A by name only
// (an address that is not this host's), with tlsCfg.
func startExportServer(t *testing.T, ctx context.Context, tlsCfg *tls.Config) exportd.Ports {
	t.Helper()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "vol"), 0o777); err != nil {
		t.Fatal(err)
	}
	cfg := exportd.Config{Root: root, Listen: "127.0.0.1", NLMPort: -1, RDMAPort: 0, TLS: tlsCfg}
	sctx, cancel := context.WithCancel(ctx)
	s, err := exportd.New(sctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if _, err := s.Registry().AddVolume("vol", 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Registry().Grant("vol", admin.Access{Node: certNodeA + "@10.9.9.9", Name: certNodeA, Addrs: []string{"10.9.9.9"}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(sctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("the export server did not stop")
		}
	})
	return s.Ports()
}
