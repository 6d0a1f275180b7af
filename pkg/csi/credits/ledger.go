package credits

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// Defaults of the ledger.
const (
	// DefaultName is the ledger ConfigMap's name.
	DefaultName = "nfsrdma-credits"
	// DefaultBudget is each export server's credit budget: what it grants
	// all pods together (64 connections at the server's default of 32
	// credits each would be 2048; the default keeps receive memory at
	// 512 x 4 KiB inline buffers = 2 MiB per server).
	DefaultBudget = 512
	// AnnotationCredits on a pod overrides its StorageClass creditsPerPod.
	AnnotationCredits = "nfsrdma.csi.dev/credits"
	// DefaultDesired is a pod's demand when neither says anything; it is
	// also the driver's default StorageClass creditsPerPod.
	DefaultDesired = 16
	// KeyServer and KeyCreditsPerPod are the StorageClass parameters and
	// volume context keys (a PV's or inline volume's attributes) naming
	// the export server and a pod's credits; package csi uses these.
	KeyServer        = "server"
	KeyCreditsPerPod = "creditsPerPod"
	// budgetKey holds the per-server totals in the ledger.
	budgetKey = "_servers"
)

// Entry is one pod's grant, the value of its ledger key NAMESPACE.NAME.
type Entry struct {
	Pod     string   `json:"pod"` // NAMESPACE/NAME
	UID     string   `json:"uid"`
	Server  string   `json:"server"`
	Volumes []string `json:"volumes"` // PV names (or inline volume names)
	Desired int      `json:"desired"`
	Granted int      `json:"granted"`
}

// ServerTotal is one server's line in the ledger's _servers key.
type ServerTotal struct {
	Budget  int `json:"budget"`
	Desired int `json:"desired"`
	Granted int `json:"granted"`
	Pods    int `json:"pods"`
}

// Key is the ledger key of a pod.
func Key(namespace, name string) string { return namespace + "." + name }

// Config configures a Ledger.
type Config struct {
	Client     kubernetes.Interface
	Namespace  string // where the ConfigMap lives
	Name       string // the ConfigMap (default DefaultName)
	DriverName string // CSI driver whose volumes count (nfsrdma.csi.dev)
	// Budget is the credits per export server (default DefaultBudget).
	Budget int
	// Resync is the full recomputation period (default 1 minute); each
	// resync pushes every server's grants again.
	Resync time.Duration
	// Push, when set, gives an export server the grants of the pods using
	// it, keyed by the AUTH_SYS machine name their mounts use
	// (MachineName), so that the server enforces them per connection
	// (admin API PUT /v1/credits). It is called when a server's grants
	// change (with an empty map once no pod uses it) and at every resync;
	// a failure is logged and retried at the next change or resync.
	Push func(ctx context.Context, server string, grants map[string]int) error
}

// MachineName is the AUTH_SYS machine name of a pod's mounts, as the node
// plugin sets it: "NODE/NAMESPACE/POD".
func MachineName(node, namespace, pod string) string { return node + "/" + namespace + "/" + pod }

// Ledger recomputes the grants whenever pods, PVCs or PVs change and
// writes them to the ConfigMap; pods whose grant is reduced or refused
// get an event.
type Ledger struct {
	cfg      Config
	pods     corelisters.PodLister
	pvcs     corelisters.PersistentVolumeClaimLister
	pvs      corelisters.PersistentVolumeLister
	recorder record.EventRecorder
	kick     chan struct{}
	pushed   map[string]map[string]int // per server, the grants it accepted last
}

// New builds a ledger.
func New(cfg Config) *Ledger {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Budget == 0 {
		cfg.Budget = DefaultBudget
	}
	if cfg.Resync == 0 {
		cfg.Resync = time.Minute
	}
	return &Ledger{cfg: cfg, kick: make(chan struct{}, 1), pushed: map[string]map[string]int{}}
}

// Run watches pods, PVCs and PVs and keeps the ledger until ctx ends.
// Its first computation pushes every server's grants, whatever an earlier
// Run pushed: between two terms of leadership (RunElected) another
// replica may have pushed others.
func (l *Ledger) Run(ctx context.Context) error {
	l.pushed = map[string]map[string]int{}
	f := informers.NewSharedInformerFactory(l.cfg.Client, l.cfg.Resync)
	pi, ci, vi := f.Core().V1().Pods(), f.Core().V1().PersistentVolumeClaims(), f.Core().V1().PersistentVolumes()
	l.pods, l.pvcs, l.pvs = pi.Lister(), ci.Lister(), vi.Lister()
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { l.poke() },
		UpdateFunc: func(any, any) { l.poke() },
		DeleteFunc: func(any) { l.poke() },
	}
	for _, inf := range []cache.SharedIndexInformer{pi.Informer(), ci.Informer(), vi.Informer()} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: l.cfg.Client.CoreV1().Events("")})
	defer b.Shutdown()
	l.recorder = b.NewRecorder(scheme(), corev1.EventSource{Component: "nfsrdma-credits"})
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("credits: cache of %v not synced", typ)
		}
	}
	klog.InfoS("credits: ledger running", "configmap", l.cfg.Namespace+"/"+l.cfg.Name, "budget", l.cfg.Budget)
	tick := time.NewTicker(l.cfg.Resync)
	defer tick.Stop()
	l.poke()
	for {
		force := false
		select {
		case <-ctx.Done():
			return nil
		case <-l.kick:
		case <-tick.C:
			force = true
		}
		// coalesce bursts of events
		time.Sleep(100 * time.Millisecond)
		select {
		case <-l.kick:
		default:
		}
		if err := l.sync(ctx, force); err != nil {
			klog.ErrorS(err, "credits: ledger update failed; retrying")
			time.AfterFunc(2*time.Second, l.poke)
		}
	}
}

func (l *Ledger) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// demand is one pod's use of one server.
type demand struct {
	pod     *corev1.Pod
	server  string
	volumes []string
	desired int
}

// demands lists, per server, the pods using our volumes there.
func (l *Ledger) demands() (map[string][]demand, error) {
	pods, err := l.pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := map[string][]demand{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		byServer := map[string]*demand{}
		for _, v := range p.Spec.Volumes {
			server, per, name := "", 0, ""
			switch {
			case v.PersistentVolumeClaim != nil:
				pvc, err := l.pvcs.PersistentVolumeClaims(p.Namespace).Get(v.PersistentVolumeClaim.ClaimName)
				if err != nil || pvc.Spec.VolumeName == "" {
					continue
				}
				pv, err := l.pvs.Get(pvc.Spec.VolumeName)
				if err != nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != l.cfg.DriverName {
					continue
				}
				server, name = pv.Spec.CSI.VolumeAttributes[KeyServer], pv.Name
				per, _ = strconv.Atoi(pv.Spec.CSI.VolumeAttributes[KeyCreditsPerPod])
			case v.CSI != nil && v.CSI.Driver == l.cfg.DriverName:
				server, name = v.CSI.VolumeAttributes[KeyServer], v.Name
				per, _ = strconv.Atoi(v.CSI.VolumeAttributes[KeyCreditsPerPod])
			default:
				continue
			}
			if server == "" {
				continue
			}
			d := byServer[server]
			if d == nil {
				d = &demand{pod: p, server: server}
				byServer[server] = d
			}
			d.volumes = append(d.volumes, name)
			d.desired = max(d.desired, per) // one connection per volume mount; the largest class wins
		}
		for s, d := range byServer {
			if a, err := strconv.Atoi(p.Annotations[AnnotationCredits]); err == nil && a > 0 {
				d.desired = a
			}
			if d.desired <= 0 {
				d.desired = DefaultDesired
			}
			out[s] = append(out[s], *d)
		}
	}
	return out, nil
}

// sync recomputes every grant, writes the ledger when it changed and
// pushes the servers' grants (all of them when force).
func (l *Ledger) sync(ctx context.Context, force bool) error {
	dem, err := l.demands()
	if err != nil {
		return err
	}
	data := map[string]string{}
	totals := map[string]ServerTotal{}
	var grants []grant
	perPod := map[string]int{} // servers each pod uses
	for server, ds := range dem {
		var ws []Want
		for _, d := range ds {
			ws = append(ws, Want{Key: Key(d.pod.Namespace, d.pod.Name), Desired: d.desired,
				Order: d.pod.CreationTimestamp.UTC().Format(time.RFC3339Nano)})
		}
		got := Allocate(l.cfg.Budget, ws)
		t := ServerTotal{Budget: l.cfg.Budget, Pods: len(ds)}
		for i, d := range ds {
			sort.Strings(d.volumes)
			e := Entry{Pod: d.pod.Namespace + "/" + d.pod.Name, UID: string(d.pod.UID), Server: server,
				Volumes: d.volumes, Desired: d.desired, Granted: got[ws[i].Key]}
			t.Desired += e.Desired
			t.Granted += e.Granted
			grants = append(grants, grant{key: ws[i].Key, pod: d.pod, Entry: e})
			perPod[ws[i].Key]++
		}
		totals[server] = t
	}
	// a pod on two servers has one entry per server: key them apart
	for i := range grants {
		if perPod[grants[i].key] > 1 {
			grants[i].key += "." + grants[i].Server
		}
		b, _ := json.Marshal(grants[i].Entry)
		data[grants[i].key] = string(b)
	}
	tb, _ := json.Marshal(totals)
	data[budgetKey] = string(tb)
	defer l.push(ctx, grants, force)

	cms := l.cfg.Client.CoreV1().ConfigMaps(l.cfg.Namespace)
	cm, err := cms.Get(ctx, l.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: l.cfg.Name, Namespace: l.cfg.Namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "nfsrdma-csi", "app.kubernetes.io/component": "credit-ledger"}},
			Data: data}
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		if err == nil {
			l.events(nil, grants, totals)
		}
		return err
	}
	if err != nil {
		return err
	}
	if maps.Equal(cm.Data, data) {
		return nil
	}
	old := cm.Data
	cm = cm.DeepCopy()
	cm.Data = data
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return err
	}
	l.events(old, grants, totals)
	klog.V(2).InfoS("credits: ledger updated", "entries", len(grants), "servers", len(totals))
	return nil
}

// push gives each server the grants of its pods (Config.Push): servers
// whose grants changed since they last accepted them, every server when
// force, and an empty set to a server no pod uses any more.
func (l *Ledger) push(ctx context.Context, grants []grant, force bool) {
	if l.cfg.Push == nil {
		return
	}
	want := map[string]map[string]int{}
	for _, g := range grants {
		if want[g.Server] == nil {
			want[g.Server] = map[string]int{}
		}
		if g.Granted > 0 && g.pod.Spec.NodeName != "" {
			want[g.Server][MachineName(g.pod.Spec.NodeName, g.pod.Namespace, g.pod.Name)] = g.Granted
		}
	}
	gone := map[string]bool{}
	for server := range l.pushed {
		if want[server] == nil {
			want[server], gone[server] = map[string]int{}, true
		}
	}
	for server, w := range want {
		if old, ok := l.pushed[server]; ok && !force && maps.Equal(old, w) {
			continue
		}
		if err := l.cfg.Push(ctx, server, w); err != nil {
			klog.InfoS("credits: the export server did not take its grants; retrying at the next change or resync", "server", server, "pods", len(w), "err", err)
			continue
		}
		klog.V(2).InfoS("credits: grants pushed to the export server", "server", server, "pods", len(w))
		if gone[server] {
			delete(l.pushed, server)
		} else {
			l.pushed[server] = w
		}
	}
}

// grant is one ledger entry with its key and pod.
type grant struct {
	key string
	pod *corev1.Pod
	Entry
}

// events tells pods whose grant is below their demand, when it changed
// from the previous ledger (old).
func (l *Ledger) events(old map[string]string, grants []grant, totals map[string]ServerTotal) {
	for _, g := range grants {
		if g.Granted >= g.Desired {
			continue
		}
		var prev Entry
		if v, ok := old[g.key]; ok {
			_ = json.Unmarshal([]byte(v), &prev)
		}
		if prev.Granted == g.Granted && prev.Desired == g.Desired {
			continue
		}
		n := totals[g.Server].Pods
		if g.Granted == 0 {
			l.recorder.Eventf(g.pod, corev1.EventTypeWarning, "CreditsRefused",
				"no RPC-over-RDMA credits on server %s: its budget of %d is taken by %d pods", g.Server, l.cfg.Budget, n)
		} else {
			l.recorder.Eventf(g.pod, corev1.EventTypeWarning, "CreditsReduced",
				"granted %d of %d RPC-over-RDMA credits on server %s (budget %d shared by %d pods)", g.Granted, g.Desired, g.Server, l.cfg.Budget, n)
		}
	}
}

func scheme() *runtime.Scheme { return clientgoscheme.Scheme }
