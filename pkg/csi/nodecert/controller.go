package nodecert

import (
	"context"
	"errors"
	"fmt"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// DefaultValidity is the lifetime of a node certificate when neither the
// controller nor the CSR (spec.expirationSeconds) says less.
const DefaultValidity = 24 * time.Hour

// Condition reasons the controller writes.
const (
	ReasonApproved = "NodeCertificateApproved"
	ReasonDenied   = "NodeCertificateDenied"
	ReasonFailed   = "NodeCertificateSigningFailed"
)

// CASource gives the CA to sign with (SecretCA).
type CASource interface {
	CA(ctx context.Context) (*CA, error)
}

// Controller approves and signs the CSRs of SignerName.
type Controller struct {
	Client kubernetes.Interface
	// Approver decides which CSRs are approved; the others are denied.
	// A CSR another party approved (an administrator with the approve
	// verb on this signer) is signed when its request fits a node
	// certificate.
	Approver Approver
	CA       CASource
	// Validity is the lifetime of the certificates (0: DefaultValidity);
	// a CSR's spec.expirationSeconds may ask for less.
	Validity time.Duration
}

// Run watches the CSRs of SignerName and handles each until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if c.Validity == 0 {
		c.Validity = DefaultValidity
	}
	f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", SignerName).String()
	}))
	inf := f.Certificates().V1().CertificateSigningRequests()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodecert"})
	defer q.ShutDown()
	add := func(obj any) {
		if k, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			q.Add(k)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: add, UpdateFunc: func(_, o any) { add(o) },
	}); err != nil {
		return err
	}
	lister := inf.Lister()
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return ctx.Err()
	}
	klog.InfoS("nodecert: signing node certificates", "signer", SignerName, "requester", c.Approver.Username, "validity", c.Validity)
	go func() { <-ctx.Done(); q.ShutDown() }()
	for {
		name, quit := q.Get()
		if quit {
			return nil
		}
		csr, err := lister.Get(name)
		if err == nil {
			err = c.Handle(ctx, csr)
		} else if apierrors.IsNotFound(err) {
			err = nil
		}
		if err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "nodecert: CSR", "csr", name)
			q.AddRateLimited(name)
		} else {
			q.Forget(name)
		}
		q.Done(name)
	}
}

// Handle takes one CSR a step: a pending one is approved or denied
// (Approver), an approved one without a certificate is signed. A CSR of
// another signer, or one denied, failed or issued, is left alone.
func (c *Controller) Handle(ctx context.Context, csr *certv1.CertificateSigningRequest) error {
	if csr.Spec.SignerName != SignerName || len(csr.Status.Certificate) != 0 ||
		hasCondition(csr, certv1.CertificateDenied) || hasCondition(csr, certv1.CertificateFailed) {
		return nil
	}
	if !hasCondition(csr, certv1.CertificateApproved) {
		return c.decide(ctx, csr)
	}
	return c.sign(ctx, csr)
}

func (c *Controller) decide(ctx context.Context, csr *certv1.CertificateSigningRequest) error {
	node, err := c.Approver.Decide(csr)
	if errors.Is(err, ErrWrongSigner) {
		return nil
	}
	csr = csr.DeepCopy()
	cond := certv1.CertificateSigningRequestCondition{Type: certv1.CertificateApproved, Status: corev1.ConditionTrue,
		Reason: ReasonApproved, Message: "node plugin's ServiceAccount asks for the name of its own node " + node}
	if err != nil {
		cond.Type, cond.Reason, cond.Message = certv1.CertificateDenied, ReasonDenied, err.Error()
	}
	cond.LastUpdateTime = metav1.Now()
	csr.Status.Conditions = append(csr.Status.Conditions, cond)
	if _, uerr := c.Client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); uerr != nil {
		return fmt.Errorf("nodecert: %s %s: %w", cond.Type, csr.Name, uerr)
	}
	klog.InfoS("nodecert: CSR "+string(cond.Type), "csr", csr.Name, "requester", csr.Spec.Username, "node", node, "reason", cond.Message)
	// an approved CSR comes back through the informer and is signed then
	return nil
}

func (c *Controller) sign(ctx context.Context, csr *certv1.CertificateSigningRequest) error {
	req, err := ParseRequest(csr.Spec.Request)
	if err == nil {
		err = checkUsages(csr.Spec.Usages)
	}
	if err != nil {
		return c.fail(ctx, csr, err)
	}
	ca, err := c.CA.CA(ctx)
	if err != nil {
		return err // retried: the Secret may come
	}
	validity := c.Validity
	if e := csr.Spec.ExpirationSeconds; e != nil && time.Duration(*e)*time.Second < validity {
		validity = max(time.Duration(*e)*time.Second, minValidity)
	}
	certPEM, err := ca.Sign(req, req.Subject.CommonName, validity, time.Now())
	if err != nil {
		return c.fail(ctx, csr, err)
	}
	csr = csr.DeepCopy()
	csr.Status.Certificate = certPEM
	if _, err := c.Client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("nodecert: issue %s: %w", csr.Name, err)
	}
	klog.InfoS("nodecert: issued", "csr", csr.Name, "node", req.Subject.CommonName, "validity", validity)
	return nil
}

// fail sets the Failed condition: the CSR cannot be signed.
func (c *Controller) fail(ctx context.Context, csr *certv1.CertificateSigningRequest, cause error) error {
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, certv1.CertificateSigningRequestCondition{
		Type: certv1.CertificateFailed, Status: corev1.ConditionTrue, Reason: ReasonFailed, Message: cause.Error(),
		LastUpdateTime: metav1.Now()})
	if _, err := c.Client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("nodecert: fail %s (%v): %w", csr.Name, cause, err)
	}
	klog.InfoS("nodecert: CSR failed", "csr", csr.Name, "err", cause)
	return nil
}

func hasCondition(csr *certv1.CertificateSigningRequest, t certv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == t && c.Status != corev1.ConditionFalse {
			return true
		}
	}
	return false
}
