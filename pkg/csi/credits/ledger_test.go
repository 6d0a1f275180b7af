package credits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

const driver = "nfsrdma.csi.dev"

func pv(name, server, per string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "1#" + server + "#/#" + name + "#delete",
			VolumeAttributes: map[string]string{"server": server, "creditsPerPod": per}}}}}
}

func pvc(ns, name, volume string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: volume}}
}

func pod(ns, name, claim string, created int, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Annotations: ann,
		CreationTimestamp: metav1.NewTime(time.Unix(int64(1000+created), 0))},
		Spec: corev1.PodSpec{NodeName: "n1", Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}}
}

// ledger waits until the ConfigMap satisfies ok and returns its entries.
func ledger(t *testing.T, c *fake.Clientset, ok func(map[string]Entry) bool) map[string]Entry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last map[string]Entry
	for time.Now().Before(deadline) {
		cm, err := c.CoreV1().ConfigMaps("csi").Get(context.Background(), DefaultName, metav1.GetOptions{})
		if err == nil {
			last = map[string]Entry{}
			for k, v := range cm.Data {
				if k == budgetKey {
					continue
				}
				var e Entry
				if err := json.Unmarshal([]byte(v), &e); err != nil {
					t.Fatalf("entry %s: %v", k, err)
				}
				last[k] = e
			}
			if ok(last) {
				return last
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("ledger never reached the expected state; last %+v", last)
	return nil
}

// TestLedger: pods using our volumes get their StorageClass share (or
// their annotation's), the budget is shared fairly when they ask for
// more, a reduced pod gets an event, and a deleted pod's grant is freed
// and given back to the others; other drivers' volumes do not count.
func TestLedger(t *testing.T) {
	c := fake.NewSimpleClientset(
		pv("pv-a", "10.0.0.5", "16"), pvc("ns1", "claim-a", "pv-a"),
		pv("pv-b", "10.0.0.5", "16"), pvc("ns1", "claim-b", "pv-b"),
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-other"}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "other.csi", VolumeHandle: "x"}}}},
		pvc("ns1", "claim-other", "pv-other"),
		pod("ns1", "web-1", "claim-a", 1, nil),
		pod("ns1", "other", "claim-other", 2, nil),
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := &fakeServers{fail: map[string]bool{}, got: map[string]map[string]int{}}
	l := New(Config{Client: c, Namespace: "csi", DriverName: driver, Budget: 24, Resync: time.Hour, Push: srv.push})
	go l.Run(ctx)

	got := ledger(t, c, func(m map[string]Entry) bool { return len(m) == 1 })
	if e := got["ns1.web-1"]; e.Granted != 16 || e.Desired != 16 || e.Server != "10.0.0.5" || e.UID != "uid-web-1" || strings.Join(e.Volumes, ",") != "pv-a" {
		t.Fatalf("web-1: %+v", e)
	}
	// the export server is told the grant, keyed by the mount's machine name
	srv.wait(t, "10.0.0.5", map[string]int{"n1/ns1/web-1": 16})
	// a second pod: 16+16 > 24, fair halves
	c.CoreV1().Pods("ns1").Create(ctx, pod("ns1", "web-2", "claim-b", 3, nil), metav1.CreateOptions{})
	ledger(t, c, func(m map[string]Entry) bool {
		return m["ns1.web-1"].Granted == 12 && m["ns1.web-2"].Granted == 12
	})
	srv.wait(t, "10.0.0.5", map[string]int{"n1/ns1/web-1": 12, "n1/ns1/web-2": 12})
	// an annotation asks for less: the other gets the rest
	p2, _ := c.CoreV1().Pods("ns1").Get(ctx, "web-2", metav1.GetOptions{})
	p2.Annotations = map[string]string{AnnotationCredits: "4"}
	c.CoreV1().Pods("ns1").Update(ctx, p2, metav1.UpdateOptions{})
	ledger(t, c, func(m map[string]Entry) bool {
		return m["ns1.web-1"].Granted == 16 && m["ns1.web-2"].Granted == 4 && m["ns1.web-2"].Desired == 4
	})
	// three more pods on the same claim: the budget of 24 shared by 5
	for i := 3; i <= 5; i++ {
		c.CoreV1().Pods("ns1").Create(ctx, pod("ns1", fmt.Sprint("web-", i), "claim-a", 3+i, nil), metav1.CreateOptions{})
	}
	got = ledger(t, c, func(m map[string]Entry) bool { return len(m) == 5 && m["ns1.web-5"].Granted > 0 })
	sum := 0
	for _, e := range got {
		sum += e.Granted
	}
	if sum > 24 || got["ns1.web-2"].Granted != 4 {
		t.Fatalf("5 pods on a budget of 24: %+v", got)
	}
	// events for the reduced pods
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs, _ := c.CoreV1().Events("ns1").List(ctx, metav1.ListOptions{})
		found := false
		for _, ev := range evs.Items {
			if ev.Reason == "CreditsReduced" && ev.InvolvedObject.Name == "web-1" {
				found = true
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CreditsReduced event for web-1: %+v", evs.Items)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// pods go away: grants freed and given back
	for i := 2; i <= 5; i++ {
		c.CoreV1().Pods("ns1").Delete(ctx, fmt.Sprint("web-", i), metav1.DeleteOptions{})
	}
	ledger(t, c, func(m map[string]Entry) bool { return len(m) == 1 && m["ns1.web-1"].Granted == 16 })
	srv.wait(t, "10.0.0.5", map[string]int{"n1/ns1/web-1": 16})

	// Lookup, as the node plugin does
	e, err := Lookup(ctx, c, "csi", DefaultName, "ns1", "web-1", "10.0.0.5", time.Second)
	if err != nil || e.Granted != 16 {
		t.Fatalf("Lookup: %+v %v", e, err)
	}
	if _, err := Lookup(ctx, c, "csi", DefaultName, "ns1", "nobody", "10.0.0.5", 300*time.Millisecond); err == nil {
		t.Fatal("Lookup of a pod with no entry succeeded")
	}
}

// fakeServers records the grants pushed to each export server; a server
// in fail refuses them.
type fakeServers struct {
	mu    sync.Mutex
	fail  map[string]bool
	got   map[string]map[string]int
	calls int
}

func (f *fakeServers) push(_ context.Context, server string, grants map[string]int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail[server] {
		return errors.New("connection refused")
	}
	f.got[server] = maps.Clone(grants)
	return nil
}

// wait waits until server holds exactly want.
func (f *fakeServers) wait(t *testing.T, server string, want map[string]int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		got, ok := f.got[server]
		f.mu.Unlock()
		if ok && maps.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %s holds %v, want %v", server, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLedgerPush: each export server gets its own pods' grants, a server
// that refused them gets them again once it takes them, and a server no
// pod uses any more is cleared.
func TestLedgerPush(t *testing.T) {
	c := fake.NewSimpleClientset(
		pv("pv-a", "10.0.0.5", "8"), pvc("ns1", "claim-a", "pv-a"),
		pv("pv-b", "10.0.0.6", "4"), pvc("ns1", "claim-b", "pv-b"),
		pod("ns1", "a", "claim-a", 1, nil),
		pod("ns1", "b", "claim-b", 2, nil),
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := &fakeServers{fail: map[string]bool{"10.0.0.6": true}, got: map[string]map[string]int{}}
	l := New(Config{Client: c, Namespace: "csi", DriverName: driver, Budget: 64, Resync: 300 * time.Millisecond, Push: srv.push})
	go l.Run(ctx)
	srv.wait(t, "10.0.0.5", map[string]int{"n1/ns1/a": 8})
	// 10.0.0.6 refuses; the resync tries again once it is back
	srv.mu.Lock()
	srv.fail["10.0.0.6"] = false
	srv.mu.Unlock()
	srv.wait(t, "10.0.0.6", map[string]int{"n1/ns1/b": 4})
	// the pod of 10.0.0.6 goes: its server is cleared
	c.CoreV1().Pods("ns1").Delete(ctx, "b", metav1.DeleteOptions{})
	srv.wait(t, "10.0.0.6", map[string]int{})
	srv.wait(t, "10.0.0.5", map[string]int{"n1/ns1/a": 8})
}

// TestLedgerPushNewTerm: a ledger that runs again (a new term of
// leadership) pushes every server's grants at once, not at the next
// resync, although it pushed the same ones in its earlier term: another
// replica may have pushed others meanwhile.
func TestLedgerPushNewTerm(t *testing.T) {
	c := fake.NewSimpleClientset(pv("pv-a", "10.0.0.5", "8"), pvc("ns1", "claim-a", "pv-a"), pod("ns1", "a", "claim-a", 1, nil))
	srv := &fakeServers{fail: map[string]bool{}, got: map[string]map[string]int{}}
	l := New(Config{Client: c, Namespace: "csi", DriverName: driver, Budget: 64, Resync: time.Hour, Push: srv.push})
	for term := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { l.Run(ctx); close(done) }()
		srv.wait(t, "10.0.0.5", map[string]int{"n1/ns1/a": 8})
		cancel()
		<-done
		if term == 0 {
			// what another leader pushed meanwhile
			srv.mu.Lock()
			srv.got["10.0.0.5"] = map[string]int{"n1/ns1/a": 2}
			srv.mu.Unlock()
		}
	}
}
