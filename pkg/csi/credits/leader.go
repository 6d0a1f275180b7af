package credits

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Leader election timing, as Kubernetes controllers default to.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// RunElected runs the ledger only while this process holds the Lease
// namespace/lease (client-go leader election: 15 s lease, 10 s renew
// deadline, 2 s retry, as Kubernetes controllers default to), so that of
// several controller replicas exactly one writes the ledger. It returns
// when ctx ends.
func (l *Ledger) RunElected(ctx context.Context, namespace, lease, identity string) {
	runElected(ctx, l.cfg.Client.CoordinationV1(), namespace, lease, identity, func(ctx context.Context) {
		if err := l.Run(ctx); err != nil {
			klog.ErrorS(err, "credits: ledger stopped")
		}
	})
}

// runElected runs lead while identity holds the Lease namespace/name, and
// tries again each time it loses it, until ctx ends.
func runElected(ctx context.Context, c coordinationclient.CoordinationV1Interface, namespace, name, identity string, lead func(ctx context.Context)) {
	claimAbsentLease(ctx, c, namespace, name, identity)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     c,
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, ReleaseOnCancel: true,
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					klog.InfoS("credits: leading; running the ledger", "lease", namespace+"/"+name, "identity", identity)
					lead(ctx)
				},
				OnStoppedLeading: func() { klog.InfoS("credits: no longer leading", "identity", identity) },
			},
		})
	}
}

// claimAbsentLease creates the Lease held by identity when there is none
// yet. Replicas started together all find no Lease; client-go's leader
// election then has each create it and logs the losers' AlreadyExists at
// error level. Here the loser's AlreadyExists is expected and quiet, and
// client-go then finds a Lease held by the winner (or by this process). A
// Lease that exists is left alone.
func claimAbsentLease(ctx context.Context, c coordinationclient.CoordinationV1Interface, namespace, name, identity string) {
	now := metav1.NewMicroTime(time.Now())
	holder, seconds, transitions := identity, int32(leaseDuration/time.Second), int32(0)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &holder,
			LeaseDurationSeconds: &seconds,
			AcquireTime:          &now,
			RenewTime:            &now,
			LeaseTransitions:     &transitions,
		},
	}
	switch _, err := c.Leases(namespace).Create(ctx, l, metav1.CreateOptions{}); {
	case err == nil:
		klog.V(2).InfoS("credits: created the lease", "lease", namespace+"/"+name, "identity", identity)
	case apierrors.IsAlreadyExists(err):
	default:
		// client-go's election tries again and says why
		klog.V(2).InfoS("credits: could not create the lease", "lease", namespace+"/"+name, "err", err)
	}
}
