package app

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

// actingWatch follows the election controller's lock Lease, on every
// replica, to tell which election controller acts: this cle-controller
// deployment, kube-apiserver's built-in controller (native mode), or none.
// A holder acts while it renews: the lock changes within its lease duration
// by this process's clock, which is never compared with another machine's.
type actingWatch struct {
	mode access.Mode
	now  func() time.Time
	// alwaysCle: this replica runs without leader election (--leader-elect
	// =false) and elects whatever the lock says, so cle acts; in native mode
	// kube-apiserver's controller may act as well.
	alwaysCle bool
	// shared, in native mode, follows the lock of kube-apiserver's election
	// controller, which the replica holding this watch's lock (cle's own)
	// contends for: kube-apiserver's controller acts while it holds it, and
	// cle elects the Leases of its own strategies meanwhile.
	shared *actingWatch

	mu       sync.Mutex
	lock     *coordinationv1.Lease
	renewed  time.Time // when the holder's renewal was last seen
	informer cache.SharedIndexInformer
}

func newActingWatch(client kubernetes.Interface, mode access.Mode, namespace, name string) *actingWatch {
	w := &actingWatch{mode: mode, now: time.Now}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	w.informer = factory.Coordination().V1().Leases().Informer()
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(obj) },
		UpdateFunc: func(_, obj any) { w.observe(obj) },
		DeleteFunc: func(any) { w.observe(nil) },
	})
	return w
}

func (w *actingWatch) run(ctx context.Context) { w.informer.RunWithContext(ctx) }

func (w *actingWatch) observe(obj any) {
	l, _ := obj.(*coordinationv1.Lease)
	w.mu.Lock()
	defer w.mu.Unlock()
	if l == nil || w.lock == nil || !equality.Semantic.DeepEqual(l.Spec, w.lock.Spec) {
		w.renewed = w.now()
	}
	w.lock = l
}

// holderIsCle tells whether the lock as last seen names holder and carries
// cle-controller's label for it, acting or not.
func (w *actingWatch) holderIsCle(holder string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lock != nil && ptr.Deref(w.lock.Spec.HolderIdentity, "") == holder && access.HeldByCle(w.lock)
}

// current judges who acts now.
func (w *actingWatch) current() access.ActingController {
	w.mu.Lock()
	defer w.mu.Unlock()
	return access.JudgeActingController(w.lock, w.mode, w.renewed, w.now())
}

// collector is cle_election_controller_acting: both series on every
// replica, 1 for the controller that acts.
func (w *actingWatch) collector() prometheus.Collector {
	return &actingCollector{w: w, desc: prometheus.NewDesc("cle_election_controller_acting",
		"1 for each election controller that acts, as this replica sees the election controllers' locks: cle (this cle-controller deployment) or kube-apiserver (the controller built into kube-apiserver, in native mode). "+
			"In native mode both may act at once: kube-apiserver elects the Leases of OldestEmulationVersion while it holds its lock, and cle those of its own strategies, and every Lease while it holds that lock as well. "+
			"Every replica, active or standby, reports both: max(cle_election_controller_acting) is 0 when nobody elects.",
		[]string{"controller"}, nil)}
}

type actingCollector struct {
	w    *actingWatch
	desc *prometheus.Desc
}

func (c *actingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *actingCollector) Collect(ch chan<- prometheus.Metric) {
	acting := map[string]bool{c.w.current().Controller: true}
	if c.w.alwaysCle {
		acting[access.ActingCle] = true
	}
	if c.w.shared != nil {
		// Either cle-controller holds both locks, or kube-apiserver's
		// controller the shared one and cle's its own: both act then.
		acting[c.w.shared.current().Controller] = true
	}
	for _, who := range []string{access.ActingCle, access.ActingKubeAPIServer} {
		v := 0.0
		if acting[who] {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, who)
	}
}
