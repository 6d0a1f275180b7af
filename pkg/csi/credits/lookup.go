package credits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ErrNoEntry: the ledger has no entry for the pod (yet).
var ErrNoEntry = errors.New("credits: no ledger entry for the pod")

// Lookup reads the pod's grant on server from the ledger, polling until
// wait has passed when the entry is not there yet (the controller writes
// it when it sees the pod, usually before kubelet publishes the volume).
// Errors: ErrNoEntry after wait, API errors.
func Lookup(ctx context.Context, c kubernetes.Interface, namespace, name, podNS, podName, server string, wait time.Duration) (Entry, error) {
	deadline := time.Now().Add(wait)
	for {
		cm, err := c.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return Entry{}, fmt.Errorf("credits: ledger %s/%s: %w", namespace, name, err)
		}
		if err == nil {
			for _, k := range []string{Key(podNS, podName) + "." + server, Key(podNS, podName)} {
				v, ok := cm.Data[k]
				if !ok {
					continue
				}
				var e Entry
				if err := json.Unmarshal([]byte(v), &e); err != nil {
					return Entry{}, fmt.Errorf("credits: ledger entry %s: %w", k, err)
				}
				if e.Server == server {
					return e, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return Entry{}, fmt.Errorf("%w %s/%s on %s in %s/%s", ErrNoEntry, podNS, podName, server, namespace, name)
		}
		select {
		case <-ctx.Done():
			return Entry{}, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
