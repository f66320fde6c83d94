package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unique"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/cle-dev/cle/internal/proof"
)

// The proof of death (docs/design.md): with Pod watches, the controller
// reads the kubelet's reports of exited containers and ends the term of a
// holder whose process has exited at once, instead of when its Lease
// expires. Which process holds a term, and which one a report is about, are
// both named by the process's instance ID (internal/proof), never inferred
// from clocks or Pod phases.

const (
	// byInstanceIndex indexes LeaseCandidates by the bucket of the process
	// instance they register.
	byInstanceIndex = "cle.dev/by-instance"
	// byHolderInstanceIndex indexes Leases by the bucket of the instance
	// that made their last renewal.
	byHolderInstanceIndex = "cle.dev/by-holder-instance"
)

// instanceBucket is what the instance indexes hold of an instance ID: its
// first two hex digits. An index keeps a set of keys per value; a set per
// instance (one per candidate) would cost hundreds of bytes each, while a
// bucket of them costs a few bytes a key, and the rare exit filters one
// 256th of the objects for its instance.
func instanceBucket(id string) string { return id[:2] }

func indexByInstance(obj any) ([]string, error) {
	if lc, ok := obj.(*coordinationv1beta1.LeaseCandidate); ok {
		if p := proof.CandidateProcess(lc.Annotations); p.Known() {
			return []string{instanceBucket(p.Instance)}, nil
		}
	}
	return nil, nil
}

func indexByHolderInstance(obj any) ([]string, error) {
	if lease, ok := obj.(*coordinationv1.Lease); ok {
		if id := proof.HolderInstance(lease); id != "" {
			return []string{instanceBucket(id)}, nil
		}
	}
	return nil, nil
}

// exits are the processes the kubelet reported exited, each with the Pod
// and container whose status reported it, and when the controller first read
// the report. A process's exit counts only as reported for its own container
// of its own Pod: instance IDs are public, and any container may write
// anything into its own termination message. A report is kept for the candidate TTL (swept a tenth of it later
// at most): by then the candidate it concerns has registered a new instance
// or has been collected, and the Lease it held has expired anyway. Pods come
// and go (a Pod deleted after its containers exited takes its report with
// it), so what was read is kept here, not looked up again.
type exits struct {
	mu     sync.Mutex
	at     map[proof.Process]time.Time
	keep   time.Duration
	swept  time.Time
	sweeps time.Duration
}

func newExits(keep time.Duration) *exits {
	return &exits{at: map[proof.Process]time.Time{}, keep: keep, sweeps: keep / 10}
}

// record notes that process p exited, as read at now, and reports whether
// that is news.
func (x *exits) record(p proof.Process, now time.Time) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if now.Sub(x.swept) >= x.sweeps {
		for k, t := range x.at {
			if now.Sub(t) >= x.keep {
				delete(x.at, k)
			}
		}
		x.swept = now
	}
	if _, ok := x.at[p]; ok {
		return false
	}
	x.at[p] = now
	return true
}

// exitedAt is when the exit of process p, reported for its own container, was read
// (zero: not known to have exited). A process not Known has no exit.
func (x *exits) exitedAt(p proof.Process) time.Time {
	if x == nil || !p.Known() {
		return time.Time{}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.at[p]
}

// onPod reads the exits a Pod's status reports and, for each one that is
// news, enqueues the Leases concerned: those whose candidates registered the
// instance, and those whose last renewal it made (its candidate may have
// been re-registered by the next instance of its container already).
func (c *Controller) onPod(obj any) {
	now := c.opts.Clock.Now()
	for _, p := range podExits(obj) {
		if !c.exits.record(p, now) {
			continue
		}
		c.opts.Metrics.ExitsRead.Inc()
		for key := range leasesOfInstance(c.candidateStores, c.leaseStores, p.Instance) {
			if c.hasCandidates(key) {
				c.enqueue(key, now)
			}
		}
	}
}

// leasesOfInstance returns the Leases whose candidates (in candidates'
// stores) registered instance id, and those (in leases' stores) whose last
// renewal it made; for a member Lease, its group's.
func leasesOfInstance(candidates, leases map[string][]cache.Indexer, id string) map[types.NamespacedName]bool {
	keys := map[types.NamespacedName]bool{}
	for _, obj := range indexed(candidates, byInstanceIndex, instanceBucket(id)) {
		if lc, ok := obj.(*coordinationv1beta1.LeaseCandidate); ok && proof.CandidateProcess(lc.Annotations).Instance == id {
			keys[leaseKeyOf(lc)] = true
		}
	}
	for _, obj := range indexed(leases, byHolderInstanceIndex, instanceBucket(id)) {
		if lease, ok := obj.(*coordinationv1.Lease); ok && proof.HolderInstance(lease) == id {
			if group, _, member := memberOf(lease); member {
				keys[group] = true
				continue
			}
			keys[types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}] = true
		}
	}
	return keys
}

// indexed returns the objects of every store whose index holds value.
func indexed(stores map[string][]cache.Indexer, index, value string) []any {
	var out []any
	for _, byNamespace := range stores {
		for _, store := range byNamespace {
			objs, _ := store.ByIndex(index, value)
			out = append(out, objs...)
		}
	}
	return out
}

// PodSource is where the proof of death reads the kubelet's reports of
// exited containers: a PodWatch, or any informer of Pods. Its handlers are
// given the Pods (or what it keeps of them) whose status may report exits.
type PodSource interface {
	AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
	RemoveEventHandler(cache.ResourceEventHandlerRegistration) error
	RunWithContext(ctx context.Context)
}

// PodWatch lists and watches Pods (relisting as an informer does) for the
// proof of death, and keeps of them only the exits their statuses report:
// the controller reads nothing else of a Pod, and a cache of every Pod of a
// namespace would cost memory for each one, where few report an exit at any
// time. Its handlers are told of each Pod whose reported exits changed, as
// an add, and a handler added later of every report held.
type PodWatch struct {
	reflector *cache.Reflector
	// synced is closed once the Pods have been listed.
	synced chan struct{}

	mu sync.Mutex
	// reports are the exits reported, by Pod key, of the Pods that report
	// any.
	reports  map[string]*podReport
	handlers map[*podHandler]bool
}

// podHandler is one handler of a PodWatch and its registration.
type podHandler struct {
	w *PodWatch
	h cache.ResourceEventHandler
}

// HasSynced reports whether the watch has listed the Pods once (and so
// told the handler of every report of the list).
func (h *podHandler) HasSynced() bool {
	select {
	case <-h.w.synced:
		return true
	default:
		return false
	}
}

// HasSyncedChecker is HasSynced as a cache.DoneChecker.
func (h *podHandler) HasSyncedChecker() cache.DoneChecker { return h }

// Name and Done make a podHandler a cache.DoneChecker.
func (h *podHandler) Name() string          { return h.w.reflector.Name() }
func (h *podHandler) Done() <-chan struct{} { return h.w.synced }

// NewPodWatch returns a PodWatch of the Pods of namespace ("" for all) that
// match labelSelector ("" for all).
func NewPodWatch(client kubernetes.Interface, namespace, labelSelector string) *PodWatch {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = labelSelector
			return client.CoreV1().Pods(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = labelSelector
			return client.CoreV1().Pods(namespace).Watch(ctx, o)
		},
	}
	w := &PodWatch{synced: make(chan struct{}), reports: map[string]*podReport{}, handlers: map[*podHandler]bool{}}
	// As the generated informers do: a client that cannot stream the
	// initial list (a fake) lists and watches.
	w.reflector = cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Pod{}, w,
		cache.ReflectorOptions{Name: "pods (the proof of death)"})
	return w
}

// RunWithContext lists and watches until ctx is done.
func (w *PodWatch) RunWithContext(ctx context.Context) { w.reflector.RunWithContext(ctx) }

// AddEventHandler tells h of every report held, then of each change.
func (w *PodWatch) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ph := &podHandler{w: w, h: h}
	w.handlers[ph] = true
	for _, r := range w.reports {
		h.OnAdd(r, true)
	}
	return ph, nil
}

// RemoveEventHandler stops telling the handler of reg.
func (w *PodWatch) RemoveEventHandler(reg cache.ResourceEventHandlerRegistration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	ph, ok := reg.(*podHandler)
	if !ok || !w.handlers[ph] {
		return fmt.Errorf("not a handler of this watch: %v", reg)
	}
	delete(w.handlers, ph)
	return nil
}

// Transformer makes the reflector keep what it keeps of each Pod while it
// gathers the initial list from a stream (cache.TransformingStore).
func (w *PodWatch) Transformer() cache.TransformFunc { return slimPod }

// Add, Update, Delete, Replace and Resync are what the reflector calls
// (cache.ReflectorStore).
func (w *PodWatch) Add(obj any) error { return w.Update(obj) }
func (w *PodWatch) Resync() error     { return nil }
func (w *PodWatch) Update(obj any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.setLocked(obj)
}

func (w *PodWatch) Delete(obj any) error {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.reports, key)
	return nil
}

// Replace takes list as every Pod there is: a Pod it does not hold is gone.
func (w *PodWatch) Replace(list []any, _ string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.reports
	w.reports = make(map[string]*podReport, len(old))
	for _, obj := range list {
		r, err := reportOf(obj)
		if err != nil {
			return err
		}
		if key := r.key(); old[key] != nil && old[key].exited == r.exited {
			w.reports[key] = old[key] // not news: the handlers were told
			continue
		}
		if err := w.setLocked(r); err != nil {
			return err
		}
	}
	select {
	case <-w.synced:
	default:
		close(w.synced)
	}
	return nil
}

// setLocked holds what obj (a Pod or its podReport) reports, and tells the
// handlers when it changed; w.mu held.
func (w *PodWatch) setLocked(obj any) error {
	r, err := reportOf(obj)
	if err != nil {
		return err
	}
	key := r.key()
	if r.exited == "" {
		delete(w.reports, key)
		return nil
	}
	if old := w.reports[key]; old != nil && old.exited == r.exited {
		return nil
	}
	w.reports[key] = r
	for ph := range w.handlers {
		ph.h.OnAdd(r, false)
	}
	return nil
}

// reportOf is the podReport of a Pod, or obj itself if it is one.
func reportOf(obj any) (*podReport, error) {
	sr, err := slimPod(obj)
	if err != nil {
		return nil, err
	}
	r, ok := sr.(*podReport)
	if !ok {
		return nil, fmt.Errorf("not a Pod: %T", obj)
	}
	return r, nil
}

// podReport is what the proof of death keeps of a Pod: its namespace and
// name, and the processes whose exits its status reported, a line
// "<container> <instance>" each.
type podReport struct {
	namespace, name string
	exited          string
}

func (p *podReport) key() string { return p.namespace + "/" + p.name }

// GetObjectMeta gives a store (through meta.Accessor) the key of the Pod.
func (p *podReport) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: p.namespace, Name: p.name}
}

// slimPod keeps of a Pod its podReport. The namespace is interned: a
// namespace's Pods share one copy of its name. It is idempotent, as
// client-go asks of a transform.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &podReport{namespace: unique.Make(pod.Namespace).Value(), name: pod.Name}
	for _, p := range proof.Exited(pod) {
		out.exited += p.Container + " " + p.Instance + "\n"
	}
	return out, nil
}

// podExits returns the processes whose exits a Pod reports, from the Pod
// or from what slimPod kept of it.
func podExits(obj any) []proof.Process {
	switch pod := obj.(type) {
	case *corev1.Pod:
		return proof.Exited(pod)
	case *podReport:
		var out []proof.Process
		for line := range strings.Lines(pod.exited) {
			if container, id, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " "); ok {
				out = append(out, proof.Process{Instance: id, Pod: proof.PodOf(pod.namespace, pod.name), Container: container})
			}
		}
		return out
	}
	return nil
}
