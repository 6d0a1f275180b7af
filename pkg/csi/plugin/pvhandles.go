package plugin

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
)

// pvHandles watches the cluster's PersistentVolumes (an informer, until
// ctx ends) and returns a function giving the volume handles of those of
// driver: what the controller's ListVolumes consults to know every export
// server in use, whether or not this process made their volumes. The
// function's error says that the first list has not arrived yet.
func pvHandles(ctx context.Context, c kubernetes.Interface, driver string) func() ([]string, error) {
	f := informers.NewSharedInformerFactory(c, 0)
	pvs := f.Core().V1().PersistentVolumes()
	synced := pvs.Informer().HasSynced
	lister := pvs.Lister()
	f.Start(ctx.Done())
	return func() ([]string, error) {
		if !synced() {
			return nil, errors.New("the PersistentVolumes are not listed yet")
		}
		all, err := lister.List(labels.Everything())
		if err != nil {
			return nil, err
		}
		var hs []string
		for _, pv := range all {
			if s := pv.Spec.CSI; s != nil && s.Driver == driver {
				hs = append(hs, s.VolumeHandle)
			}
		}
		return hs, nil
	}
}
