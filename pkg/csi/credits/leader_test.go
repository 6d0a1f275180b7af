package credits

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/nfsrdma/nfsrdma-csi/internal/testfix/testenv"
)

// Two replicas started together both find no Lease (the API server's
// reads are held until both have asked): exactly one leads, and neither
// logs an error (client-go alone logs the loser's AlreadyExists as
// "error initially creating leader election record").
func TestRunElectedTogether(t *testing.T) {
	logs := testenv.CaptureKlog(t, 0)

	c := fake.NewClientset()
	// hold every replica's first read of the Lease until both have made it
	var arrived atomic.Int32
	both := make(chan struct{})
	var once sync.Once
	c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if arrived.Add(1) == 2 {
			once.Do(func() { close(both) })
		}
		select {
		case <-both:
		case <-time.After(5 * time.Second):
		}
		return false, nil, nil
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var leading atomic.Int32
	started := make(chan string, 2)
	var wg sync.WaitGroup
	for _, id := range []string{"replica-a", "replica-b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runElected(ctx, c.CoordinationV1(), "csi", "nfsrdma-csi-credits", id, func(ctx context.Context) {
				leading.Add(1)
				started <- id
				<-ctx.Done()
				leading.Add(-1)
			})
		}()
	}
	var leader string
	select {
	case leader = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no replica leads after 10 s")
	}
	// the other replica has had several retry periods to take the Lease
	time.Sleep(3 * retryPeriod)
	if n := leading.Load(); n != 1 {
		t.Fatalf("%d replicas lead, want 1", n)
	}
	cancel()
	wg.Wait()
	klog.Flush()
	out := logs.String()
	if !strings.Contains(out, "leading; running the ledger") || !strings.Contains(out, leader) {
		t.Fatalf("log lacks the leader's line:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "E") {
			t.Errorf("error logged: %s", line)
		}
	}
}
