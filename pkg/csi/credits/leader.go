package credits

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// RunElected runs the ledger only while this process holds the Lease
// namespace/lease (client-go leader election: 15 s lease, 10 s renew
// deadline, 2 s retry, as Kubernetes controllers default to), so that of
// several controller replicas exactly one writes the ledger. It returns
// when ctx ends.
func (l *Ledger) RunElected(ctx context.Context, namespace, lease, identity string) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: lease},
		Client:     l.cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, ReleaseOnCancel: true,
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					klog.InfoS("credits: leading; running the ledger", "lease", namespace+"/"+lease, "identity", identity)
					if err := l.Run(ctx); err != nil {
						klog.ErrorS(err, "credits: ledger stopped")
					}
				},
				OnStoppedLeading: func() { klog.InfoS("credits: no longer leading", "identity", identity) },
			},
		})
	}
}
