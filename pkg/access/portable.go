package access

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// CandidateResource is the portable mode's LeaseCandidate custom resource.
var CandidateResource = schema.GroupVersionResource{Group: "cle.dev", Version: "v1beta1", Resource: "leasecandidates"}

// CandidateKind is the kind of CandidateResource.
const CandidateKind = "LeaseCandidate"

// portable is the access layer over the LeaseCandidate custom resource and
// annotated Leases.
type portable struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

// NewPortable returns the portable-mode access layer. It does not check that
// the CRD is installed; Detect does.
func NewPortable(clients Clients) (Interface, error) {
	if clients.Kube == nil || clients.Dynamic == nil {
		return nil, errors.New("access: portable mode needs Clients.Kube and Clients.Dynamic")
	}
	return &portable{kube: clients.Kube, dyn: clients.Dynamic}, nil
}

func (p *portable) Mode() Mode { return ModePortable }

func (p *portable) ControllerLockName() string { return PortableControllerLock }

func (p *portable) LeaseCandidates(namespace string) CandidateClient {
	return portableCandidates{p.dyn.Resource(CandidateResource).Namespace(namespace)}
}

func (p *portable) CandidateReference(lc *coordinationv1beta1.LeaseCandidate) *corev1.ObjectReference {
	return candidateReference(CandidateResource.GroupVersion(), lc)
}

func (p *portable) Leases(namespace string) LeaseClient {
	return portableLeases{p.kube.CoordinationV1().Leases(namespace)}
}

func (p *portable) NewCandidateInformer(namespace string, resync time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	c := p.dyn.Resource(CandidateResource).Namespace(namespace)
	return newInformer(&coordinationv1beta1.LeaseCandidate{}, resync, tweak,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list, err := c.List(ctx, o)
			if err != nil {
				return nil, err
			}
			return candidateListFromUnstructured(list)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := c.Watch(ctx, o)
			if err != nil {
				return nil, err
			}
			return convertWatch(w, func(obj runtime.Object) (runtime.Object, error) {
				u, ok := obj.(*unstructured.Unstructured)
				if !ok {
					return nil, fmt.Errorf("watch of %s sent %T", CandidateResource, obj)
				}
				return CandidateFromUnstructured(u)
			}), nil
		})
}

func (p *portable) NewLeaseInformer(namespace string, resync time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	c := p.kube.CoordinationV1().Leases(namespace)
	return newInformer(&coordinationv1.Lease{}, resync, tweak,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list, err := c.List(ctx, o)
			if err != nil {
				return nil, err
			}
			// The list was decoded for this call alone: nothing else
			// holds its items, so they are mapped in place.
			for i := range list.Items {
				leaseFromStored(&list.Items[i])
			}
			return list, nil
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := c.Watch(ctx, o)
			if err != nil {
				return nil, err
			}
			return convertWatch(w, func(obj runtime.Object) (runtime.Object, error) {
				lease, ok := obj.(*coordinationv1.Lease)
				if !ok {
					return nil, fmt.Errorf("watch of Leases sent %T", obj)
				}
				leaseFromStored(lease)
				return lease, nil
			}), nil
		})
}

// convertWatch converts the objects of a watch's Added, Modified, Deleted
// and Bookmark events with convert. Error events pass through unchanged, so
// that the reflector sees the server's status (an expired resourceVersion,
// say). An object that does not convert becomes an Error event, on which the
// reflector restarts its watch instead of storing something wrong.
//
// Unlike watch.Filter, the converting goroutine also ends when Stop is
// called while an event is waiting to be received, so a consumer that stops
// without draining the channel (the reflector does) leaks nothing.
func convertWatch(w watch.Interface, convert func(runtime.Object) (runtime.Object, error)) watch.Interface {
	cw := &convertingWatch{in: w, out: make(chan watch.Event), stopped: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(cw.done)
		defer close(cw.out)
		for ev := range w.ResultChan() {
			if ev.Type != watch.Error {
				obj, err := convert(ev.Object)
				if err != nil {
					ev = watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus}
				} else {
					ev.Object = obj
				}
			}
			select {
			case cw.out <- ev:
			case <-cw.stopped:
				return
			}
		}
	}()
	return cw
}

type convertingWatch struct {
	in       watch.Interface
	out      chan watch.Event
	stopOnce sync.Once
	stopped  chan struct{}
	done     chan struct{} // closed when the converting goroutine has ended
}

func (c *convertingWatch) ResultChan() <-chan watch.Event { return c.out }

func (c *convertingWatch) Stop() {
	c.stopOnce.Do(func() {
		close(c.stopped)
		c.in.Stop()
	})
}

// CandidateFromUnstructured converts a cle.dev/v1beta1 LeaseCandidate to the
// coordination.k8s.io/v1beta1 type. The result has an empty TypeMeta, like
// the objects of the typed clients.
func CandidateFromUnstructured(u *unstructured.Unstructured) (*coordinationv1beta1.LeaseCandidate, error) {
	if gvk := u.GroupVersionKind(); gvk != CandidateResource.GroupVersion().WithKind(CandidateKind) && gvk.Kind != "" {
		return nil, fmt.Errorf("convert %s %s: not a %s", gvk, objectRef(u), CandidateKind)
	}
	lc := &coordinationv1beta1.LeaseCandidate{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), lc); err != nil {
		return nil, fmt.Errorf("convert LeaseCandidate %s: %w", objectRef(u), err)
	}
	lc.TypeMeta = metav1.TypeMeta{}
	return lc, nil
}

// CandidateToUnstructured converts a LeaseCandidate to the cle.dev/v1beta1
// custom resource.
func CandidateToUnstructured(lc *coordinationv1beta1.LeaseCandidate) (*unstructured.Unstructured, error) {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(lc)
	if err != nil {
		return nil, fmt.Errorf("convert LeaseCandidate %s/%s: %w", lc.Namespace, lc.Name, err)
	}
	u := &unstructured.Unstructured{Object: content}
	// A zero creationTimestamp converts to null; the server ignores it,
	// but leaving it out keeps the request what a client would write.
	if ts, found, _ := unstructured.NestedFieldNoCopy(content, "metadata", "creationTimestamp"); found && ts == nil {
		unstructured.RemoveNestedField(content, "metadata", "creationTimestamp")
	}
	u.SetGroupVersionKind(CandidateResource.GroupVersion().WithKind(CandidateKind))
	return u, nil
}

func candidateListFromUnstructured(list *unstructured.UnstructuredList) (*coordinationv1beta1.LeaseCandidateList, error) {
	out := &coordinationv1beta1.LeaseCandidateList{
		ListMeta: metav1.ListMeta{
			ResourceVersion:    list.GetResourceVersion(),
			Continue:           list.GetContinue(),
			RemainingItemCount: list.GetRemainingItemCount(),
		},
		Items: make([]coordinationv1beta1.LeaseCandidate, 0, len(list.Items)),
	}
	for i := range list.Items {
		lc, err := CandidateFromUnstructured(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, *lc)
	}
	return out, nil
}

func objectRef(u *unstructured.Unstructured) string {
	if ns := u.GetNamespace(); ns != "" {
		return ns + "/" + u.GetName()
	}
	return u.GetName()
}

// leaseFromStored moves the coordinated fields of a stored Lease from its
// annotations into spec, in place. The annotations stay: they say the same,
// and leaseToStored rewrites them from spec on the way back. Spec fields a
// gate-on server may have stored are not portable mode's: they are replaced.
func leaseFromStored(lease *coordinationv1.Lease) {
	lease.Spec.Strategy = nil
	lease.Spec.PreferredHolder = nil
	if v := lease.Annotations[StrategyAnnotation]; v != "" {
		s := coordinationv1.CoordinatedLeaseStrategy(v)
		lease.Spec.Strategy = &s
	}
	if v := lease.Annotations[PreferredHolderAnnotation]; v != "" {
		lease.Spec.PreferredHolder = &v
	}
}

// leaseToStored returns a copy of lease as portable mode stores it: the
// coordinated fields in annotations (absent when the field is nil or empty)
// and not in spec, which a gate-off server would strip anyway.
func leaseToStored(lease *coordinationv1.Lease) *coordinationv1.Lease {
	out := lease.DeepCopy()
	setOrRemove := func(key string, value *string) {
		if value != nil && *value != "" {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[key] = *value
			return
		}
		delete(out.Annotations, key)
	}
	var strategy *string
	if out.Spec.Strategy != nil {
		s := string(*out.Spec.Strategy)
		strategy = &s
	}
	setOrRemove(StrategyAnnotation, strategy)
	setOrRemove(PreferredHolderAnnotation, out.Spec.PreferredHolder)
	if len(out.Annotations) == 0 {
		out.Annotations = nil
	}
	out.Spec.Strategy = nil
	out.Spec.PreferredHolder = nil
	return out
}

type portableCandidates struct {
	c dynamic.ResourceInterface
}

func (p portableCandidates) Get(ctx context.Context, name string) (*coordinationv1beta1.LeaseCandidate, error) {
	u, err := p.c.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return CandidateFromUnstructured(u)
}

func (p portableCandidates) Create(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, error) {
	u, err := CandidateToUnstructured(lc)
	if err != nil {
		return nil, err
	}
	created, err := p.c.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return CandidateFromUnstructured(created)
}

func (p portableCandidates) Update(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, error) {
	u, err := CandidateToUnstructured(lc)
	if err != nil {
		return nil, err
	}
	updated, err := p.c.Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return CandidateFromUnstructured(updated)
}

func (p portableCandidates) Delete(ctx context.Context, name string, pre *metav1.Preconditions) error {
	return p.c.Delete(ctx, name, metav1.DeleteOptions{Preconditions: pre})
}

type portableLeases struct {
	c coordinationv1client.LeaseInterface
}

func (p portableLeases) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	lease, err := p.c.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	leaseFromStored(lease)
	return lease, nil
}

func (p portableLeases) Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	created, err := p.c.Create(ctx, leaseToStored(lease), metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	leaseFromStored(created)
	return created, nil
}

func (p portableLeases) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	updated, err := p.c.Update(ctx, leaseToStored(lease), metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	leaseFromStored(updated)
	return updated, nil
}

func (p portableLeases) Delete(ctx context.Context, name string, pre *metav1.Preconditions) error {
	return p.c.Delete(ctx, name, metav1.DeleteOptions{Preconditions: pre})
}
