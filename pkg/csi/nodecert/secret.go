package nodecert

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// DefaultCAValidity is the lifetime of a CA SecretCA.Ensure makes.
const DefaultCAValidity = 10 * 365 * 24 * time.Hour

// SecretCA is a CA kept in a Secret of type kubernetes.io/tls: tls.crt
// (the CA certificate) and tls.key (its key), as cert-manager writes a CA
// it issued. The Secret is read at each signing, so that a replaced CA
// signs from the next CSR on.
type SecretCA struct {
	Client          kubernetes.Interface
	Namespace, Name string
}

// CA reads and parses the Secret. Errors: the API's (NotFound when the
// Secret is absent), ParseCA's.
func (s SecretCA) CA(ctx context.Context) (*CA, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("nodecert: CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	ca, err := ParseCA(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("nodecert: CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return ca, nil
}

// Ensure makes the Secret with a new CA (NewCA, named after the Secret,
// DefaultCAValidity) when it does not exist, and returns the CA the
// Secret holds: one an administrator or an earlier run put there is kept.
// Two controllers racing both end with the one that was created first.
func (s SecretCA) Ensure(ctx context.Context) (*CA, error) {
	ca, err := s.CA(ctx)
	if !apierrors.IsNotFound(err) {
		return ca, err
	}
	_, certPEM, keyPEM, err := NewCA(s.Namespace+"/"+s.Name, DefaultCAValidity)
	if err != nil {
		return nil, err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "nfsrdma-csi"}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}
	_, err = s.Client.CoreV1().Secrets(s.Namespace).Create(ctx, sec, metav1.CreateOptions{})
	switch {
	case err == nil:
		klog.InfoS("nodecert: made a CA for node certificates", "secret", klog.KRef(s.Namespace, s.Name))
	case !apierrors.IsAlreadyExists(err):
		return nil, fmt.Errorf("nodecert: CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return s.CA(ctx)
}
