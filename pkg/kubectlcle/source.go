package kubectlcle

import (
	"context"
	"fmt"
	"slices"
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
	"k8s.io/klog/v2"

	"github.com/cle-dev/cle/pkg/access"
)

// Source reads Leases, LeaseCandidates and Events. Leases and candidates go
// through the access layer, so that they look the same in both API modes.
type Source struct {
	Access access.Interface
	Kube   kubernetes.Interface
	// LeaseSelector is a label selector on Leases ("" selects all), applied
	// by the server.
	LeaseSelector string
	// ExcludeNamespaces are left out of lists and watches of all
	// namespaces, by the server (a field selector on metadata.namespace):
	// e.g. kube-node-lease, which holds every node's heartbeat Lease.
	ExcludeNamespaces []string
}

// informers are a Lease informer and a candidate informer on one namespace
// (all if empty).
type informers struct {
	leases, candidates cache.SharedIndexInformer
}

func (src Source) newInformers(namespace string) informers {
	fieldSelector := ""
	if namespace == "" && len(src.ExcludeNamespaces) > 0 {
		var sels []fields.Selector
		for _, ns := range src.ExcludeNamespaces {
			sels = append(sels, fields.OneTermNotEqualSelector("metadata.namespace", ns))
		}
		fieldSelector = fields.AndSelectors(sels...).String()
	}
	var leaseTweak, candTweak func(*metav1.ListOptions)
	if fieldSelector != "" || src.LeaseSelector != "" {
		leaseTweak = func(o *metav1.ListOptions) {
			o.FieldSelector = fieldSelector
			o.LabelSelector = src.LeaseSelector
		}
	}
	if fieldSelector != "" {
		candTweak = func(o *metav1.ListOptions) { o.FieldSelector = fieldSelector }
	}
	return informers{
		leases:     src.Access.NewLeaseInformer(namespace, 0, leaseTweak),
		candidates: src.Access.NewCandidateInformer(namespace, 0, candTweak),
	}
}

// onError hands every error of either informer's list or watch to handle
// (in place of client-go's default, which logs it). It must be called
// before run.
func (inf informers) onError(handle cache.WatchErrorHandlerWithContext) error {
	if err := inf.leases.SetWatchErrorHandlerWithContext(handle); err != nil {
		return fmt.Errorf("watch Leases: %w", err)
	}
	if err := inf.candidates.SetWatchErrorHandlerWithContext(handle); err != nil {
		return fmt.Errorf("watch LeaseCandidates: %w", err)
	}
	return nil
}

// run starts both informers until ctx is done, and returns a function that
// waits for them to stop.
func (inf informers) run(ctx context.Context) (wait func()) {
	done := make(chan struct{}, 2)
	go func() { inf.leases.RunWithContext(ctx); done <- struct{}{} }()
	go func() { inf.candidates.RunWithContext(ctx); done <- struct{}{} }()
	return func() { <-done; <-done }
}

// listError explains an error of the first list of Leases or
// LeaseCandidates. The access layer's informers retry what retrying can fix
// (an unreachable server, 5xx) by themselves, so what comes here, such as a
// Forbidden, does not go away by waiting.
func listError(err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return fmt.Errorf("%w (kubectl cle needs get, list and watch on Leases and LeaseCandidates: the cle-viewer ClusterRole of manifests/controller/rbac grants them, and is aggregated into the view ClusterRole)", err)
	}
	return err
}

// Snapshot lists the Leases and LeaseCandidates of namespace (all namespaces
// if empty) once. An error listing either ends it, with that error.
func (src Source) Snapshot(ctx context.Context, namespace string) ([]*coordinationv1.Lease, []*coordinationv1beta1.LeaseCandidate, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	inf := src.newInformers(namespace)
	if err := inf.onError(func(_ context.Context, _ *cache.Reflector, err error) { cancel(listError(err)) }); err != nil {
		cancel(nil)
		return nil, nil, err
	}
	wait := inf.run(ctx)
	defer wait()
	defer cancel(nil)
	if !cache.WaitForCacheSync(ctx.Done(), inf.leases.HasSynced, inf.candidates.HasSynced) {
		return nil, nil, fmt.Errorf("list Leases and LeaseCandidates: %w", context.Cause(ctx))
	}
	leases, cands := storeItems[*coordinationv1.Lease](inf.leases.GetStore()), storeItems[*coordinationv1beta1.LeaseCandidate](inf.candidates.GetStore())
	klog.FromContext(ctx).V(4).Info("Listed Leases and LeaseCandidates", "namespace", namespace, "leases", len(leases), "leaseCandidates", len(cands),
		"leaseSelector", src.LeaseSelector, "excludedNamespaces", src.ExcludeNamespaces)
	return leases, cands, nil
}

// ElectionController reads the election controllers' lock Lease of the API
// mode, in kube-system, and judges who acts (see the function
// ElectionController). It does not fail: a lock it cannot read makes the
// answer unknown.
func (src Source) ElectionController(ctx context.Context, now time.Time) *ElectionControllerStatus {
	key := types.NamespacedName{Namespace: ControllerLockNamespace, Name: src.Access.ControllerLockName()}
	lock, err := src.readLock(ctx, key)
	e := ElectionController(key, lock, err, src.Access.Mode(), now)
	if src.Access.Mode() == access.ModeNative {
		own := types.NamespacedName{Namespace: ControllerLockNamespace, Name: access.PortableControllerLock}
		// Only cle-controller takes its own lock, as in portable mode; none
		// is shown where cle-controller never took it (it runs without
		// leader election, or not at all), or where it cannot be read.
		if lock, err := src.readLock(ctx, own); err == nil {
			e.CleStrategies = ElectionController(own, lock, nil, access.ModePortable, now)
		}
	}
	return e
}

// readLock reads an election controller's lock Lease, and logs why it
// cannot.
func (src Source) readLock(ctx context.Context, key types.NamespacedName) (*coordinationv1.Lease, error) {
	lock, err := src.Access.Leases(key.Namespace).Get(ctx, key.Name)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Cannot read an election controller's lock", "lease", klog.KRef(key.Namespace, key.Name), "err", err)
	}
	return lock, err
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

// Selection is what Group returns.
type Selection struct {
	// Namespace and Name pick one Lease. Without a Name, Group returns
	// every Lease under coordinated election: those that candidates name
	// (existing or not) and those that carry a strategy.
	Namespace, Name string
	// ListedOnly leaves out the Leases that candidates name but that were
	// not listed: with a label selector on Leases, those it does not
	// select (and those that do not exist).
	ListedOnly bool
}

// Group pairs Leases with the candidates that name them, as sel says. With a
// name it returns a NotFound error if neither the Lease nor a candidate
// naming it exists. The result is sorted by namespace and name.
func Group(leases []*coordinationv1.Lease, cands []*coordinationv1beta1.LeaseCandidate, sel Selection) ([]Input, error) {
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
		return sel.Name == "" || (key.Name == sel.Name && key.Namespace == sel.Namespace)
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
		} else if sel.Name != "" || l.Spec.Strategy != nil {
			get(key).Lease = l
		}
	}
	if sel.ListedOnly {
		for key, in := range byKey {
			if in.Lease == nil {
				delete(byKey, key)
			}
		}
	}
	if sel.Name != "" && len(byKey) == 0 {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}, sel.Name)
	}
	out := make([]Input, 0, len(byKey))
	for _, in := range byKey {
		out = append(out, *in)
	}
	slices.SortFunc(out, func(a, b Input) int { return compareKeys(a.Key, b.Key) })
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
