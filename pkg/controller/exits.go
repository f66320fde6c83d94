package controller

import (
	"context"
	"sync"
	"time"

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

// The proof of death (docs/design.md): with Pod informers, the controller
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
// whose status reported it, and when the controller first read the report. A
// process's exit counts only as reported by its own Pod: instance IDs are
// public, and any container may write anything into its own termination
// message. A report is kept for the candidate TTL (swept a tenth of it later
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

// exitedAt is when the exit of process p, reported by its own Pod, was read
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
// renewal it made.
func leasesOfInstance(candidates, leases map[string][]cache.Indexer, id string) map[types.NamespacedName]bool {
	keys := map[types.NamespacedName]bool{}
	for _, obj := range indexed(candidates, byInstanceIndex, instanceBucket(id)) {
		if lc, ok := obj.(*coordinationv1beta1.LeaseCandidate); ok && proof.CandidateProcess(lc.Annotations).Instance == id {
			keys[leaseKeyOf(lc)] = true
		}
	}
	for _, obj := range indexed(leases, byHolderInstanceIndex, instanceBucket(id)) {
		if lease, ok := obj.(*coordinationv1.Lease); ok && proof.HolderInstance(lease) == id {
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

// NewPodInformer returns an informer of the Pods of namespace ("" for all)
// that match labelSelector ("" for all), for the proof of death. It keeps
// of each Pod only what the proof reads: its name and the exits its
// containers report (see slimPod), so that a namespace of many Pods costs a
// few hundred bytes for each.
func NewPodInformer(client kubernetes.Interface, namespace, labelSelector string) cache.SharedIndexInformer {
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
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	// The informer has not started: setting the transform cannot fail.
	_ = inf.SetTransform(slimPod)
	return inf
}

// slimPod is an informer transform that keeps of a Pod only its name,
// namespace, UID and resourceVersion, and the exits its status reports (the
// terminated states whose messages name an instance), as the markers of
// those instances in exitedAnnotation: a PartialObjectMetadata, a fifth of a
// Pod's size even with every field of the Pod empty. It is idempotent, as
// client-go asks of a transform.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
	}}
	if exited := proof.Exited(pod); len(exited) > 0 {
		var markers string
		for _, p := range exited {
			markers += proof.Marker(p.Instance)
		}
		out.Annotations = map[string]string{exitedAnnotation: markers}
	}
	return out, nil
}

// exitedAnnotation holds, on a Pod slimmed by slimPod (in memory, never
// written), the markers of the processes whose exits its status reported.
const exitedAnnotation = "cle.dev/exited"

// podExits returns the processes whose exits a Pod reports, from the Pod
// or from what slimPod kept of it.
func podExits(obj any) []proof.Process {
	switch pod := obj.(type) {
	case *corev1.Pod:
		return proof.Exited(pod)
	case *metav1.PartialObjectMetadata:
		var out []proof.Process
		for _, id := range proof.InstancesIn(pod.Annotations[exitedAnnotation]) {
			out = append(out, proof.Process{Instance: id, Pod: proof.PodOf(pod)})
		}
		return out
	}
	return nil
}
