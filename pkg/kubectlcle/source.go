package kubectlcle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/cle-dev/cle/pkg/access"
)

// Source reads Leases, LeaseCandidates and Events. Leases and candidates go
// through the access layer, so that they look the same in both API modes.
type Source struct {
	Access access.Interface
	Kube   kubernetes.Interface
}

// informers are a Lease informer and a candidate informer on one namespace
// (all if empty).
type informers struct {
	leases, candidates cache.SharedIndexInformer
}

func (src Source) newInformers(namespace string) informers {
	return informers{
		leases:     src.Access.NewLeaseInformer(namespace, 0, nil),
		candidates: src.Access.NewCandidateInformer(namespace, 0, nil),
	}
}

// run starts both informers until ctx is done, and returns a function that
// waits for them to stop.
func (inf informers) run(ctx context.Context) (wait func()) {
	done := make(chan struct{}, 2)
	go func() { inf.leases.RunWithContext(ctx); done <- struct{}{} }()
	go func() { inf.candidates.RunWithContext(ctx); done <- struct{}{} }()
	return func() { <-done; <-done }
}

// Snapshot lists the Leases and LeaseCandidates of namespace (all namespaces
// if empty) once.
func (src Source) Snapshot(ctx context.Context, namespace string) ([]*coordinationv1.Lease, []*coordinationv1beta1.LeaseCandidate, error) {
	ctx, cancel := context.WithCancel(ctx)
	inf := src.newInformers(namespace)
	wait := inf.run(ctx)
	defer wait()
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), inf.leases.HasSynced, inf.candidates.HasSynced) {
		return nil, nil, fmt.Errorf("list Leases and LeaseCandidates: %w", context.Cause(ctx))
	}
	return storeItems[*coordinationv1.Lease](inf.leases.GetStore()), storeItems[*coordinationv1beta1.LeaseCandidate](inf.candidates.GetStore()), nil
}

func storeItems[T any](s cache.Store) []T {
	items := s.List()
	out := make([]T, 0, len(items))
	for _, o := range items {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// Group pairs Leases with the candidates that name them. Without a name it
// returns every Lease under coordinated election: those that candidates name
// (existing or not) and those that carry a strategy; with a name, that one
// Lease of namespace, and a NotFound error if neither it nor a candidate
// naming it exists. The result is sorted by namespace and name.
func Group(leases []*coordinationv1.Lease, cands []*coordinationv1beta1.LeaseCandidate, namespace, name string) ([]Input, error) {
	byKey := map[types.NamespacedName]*Input{}
	get := func(key types.NamespacedName) *Input {
		in := byKey[key]
		if in == nil {
			in = &Input{Key: key}
			byKey[key] = in
		}
		return in
	}
	wanted := func(key types.NamespacedName) bool {
		return name == "" || (key.Name == name && key.Namespace == namespace)
	}
	for _, lc := range cands {
		key := types.NamespacedName{Namespace: lc.Namespace, Name: lc.Spec.LeaseName}
		if wanted(key) {
			in := get(key)
			in.Candidates = append(in.Candidates, lc)
		}
	}
	for _, l := range leases {
		key := types.NamespacedName{Namespace: l.Namespace, Name: l.Name}
		if !wanted(key) {
			continue
		}
		if in, ok := byKey[key]; ok {
			in.Lease = l
		} else if name != "" || l.Spec.Strategy != nil {
			get(key).Lease = l
		}
	}
	if name != "" && len(byKey) == 0 {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}, name)
	}
	out := make([]Input, 0, len(byKey))
	for _, in := range byKey {
		out = append(out, *in)
	}
	slices.SortFunc(out, func(a, b Input) int {
		if c := strings.Compare(a.Key.Namespace, b.Key.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Key.Name, b.Key.Name)
	})
	return out, nil
}

// maxEvents is how many of a Lease's Events describe shows, the latest.
const maxEvents = 10

// Events returns the latest Events about a Lease, oldest first.
func (src Source) Events(ctx context.Context, key types.NamespacedName) ([]corev1.Event, error) {
	list, err := src.Kube.CoreV1().Events(key.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.kind": "Lease", "involvedObject.name": key.Name}.String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list Events of Lease %s: %w", key, err)
	}
	events := list.Items
	slices.SortStableFunc(events, func(a, b corev1.Event) int { return EventTime(&a).Compare(EventTime(&b)) })
	if len(events) > maxEvents {
		events = events[len(events)-maxEvents:]
	}
	return events, nil
}

// EventTime is when an Event last happened, whichever API wrote it.
func EventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	default:
		return e.FirstTimestamp.Time
	}
}

// EventSource is who reported an Event.
func EventSource(e *corev1.Event) string {
	if e.ReportingController != "" {
		return e.ReportingController
	}
	return e.Source.Component
}
