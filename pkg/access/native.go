package access

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// native is the access layer over the Kubernetes coordination API.
type native struct {
	client     kubernetes.Interface
	candidates nativeCandidateAPI
}

// nativeCandidateAPI is one served version of coordination.k8s.io
// LeaseCandidates, seen as *coordinationv1beta1.LeaseCandidate whatever the
// version on the wire.
type nativeCandidateAPI struct {
	// groupVersion is what discovery calls the version.
	groupVersion string
	client       func(kubernetes.Interface, string) CandidateClient
	informer     func(kubernetes.Interface, string, time.Duration, func(*metav1.ListOptions)) cache.SharedIndexInformer
}

// nativeCandidateAPIs are the LeaseCandidate versions cle can use, newest
// first: native mode uses the first one the server serves. Supporting a new
// version is one entry here and its conversion.
var nativeCandidateAPIs = []nativeCandidateAPI{
	{
		groupVersion: coordinationv1beta1.SchemeGroupVersion.String(),
		client: func(c kubernetes.Interface, ns string) CandidateClient {
			return nativeCandidates{c.CoordinationV1beta1().LeaseCandidates(ns)}
		},
		informer: func(c kubernetes.Interface, ns string, resync time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
			lc := c.CoordinationV1beta1().LeaseCandidates(ns)
			return newInformer(&coordinationv1beta1.LeaseCandidate{}, resync, tweak,
				func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return lc.List(ctx, o) },
				func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return lc.Watch(ctx, o) })
		},
	},
	v1alpha2CandidateAPI,
}

// NewNative returns the native-mode access layer over the newest
// LeaseCandidate version cle knows (coordination.k8s.io/v1beta1). Detect
// picks the newest one the server serves.
func NewNative(client kubernetes.Interface) Interface {
	return &native{client: client, candidates: nativeCandidateAPIs[0]}
}

func (n *native) Mode() Mode { return ModeNative }

func (n *native) ControllerLockName() string { return NativeControllerLock }

// CandidateVersion is the coordination.k8s.io version that native mode reads
// and writes LeaseCandidates in.
func (n *native) CandidateVersion() string { return n.candidates.groupVersion }

func (n *native) LeaseCandidates(namespace string) CandidateClient {
	return n.candidates.client(n.client, namespace)
}

func (n *native) CandidateReference(lc *coordinationv1beta1.LeaseCandidate) *corev1.ObjectReference {
	return candidateReference(coordinationv1beta1.SchemeGroupVersion, lc)
}

func (n *native) Leases(namespace string) LeaseClient {
	return nativeLeases{n.client.CoordinationV1().Leases(namespace)}
}

func (n *native) NewCandidateInformer(namespace string, resync time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	return n.candidates.informer(n.client, namespace, resync, tweak)
}

func (n *native) NewLeaseInformer(namespace string, resync time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	c := n.client.CoordinationV1().Leases(namespace)
	return newInformer(&coordinationv1.Lease{}, resync, tweak,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, o) },
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return c.Watch(ctx, o) })
}

// newInformer builds a namespace-indexed informer from list and watch
// functions, applying tweak to both, that rides out a flapping API server
// (see steadyListWatch).
func newInformer(obj runtime.Object, resync time.Duration, tweak func(*metav1.ListOptions),
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
) cache.SharedIndexInformer {
	if tweak == nil {
		tweak = func(*metav1.ListOptions) {}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return watchFn(ctx, o)
		},
	}
	steady := newSteadyListWatch(lw, obj)
	inf := cache.NewSharedIndexInformer(steady, obj, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	steady.cached = inf.GetIndexer().GetByKey
	return inf
}

type nativeCandidates struct {
	c interface {
		Get(context.Context, string, metav1.GetOptions) (*coordinationv1beta1.LeaseCandidate, error)
		Create(context.Context, *coordinationv1beta1.LeaseCandidate, metav1.CreateOptions) (*coordinationv1beta1.LeaseCandidate, error)
		Update(context.Context, *coordinationv1beta1.LeaseCandidate, metav1.UpdateOptions) (*coordinationv1beta1.LeaseCandidate, error)
		Delete(context.Context, string, metav1.DeleteOptions) error
	}
}

func (n nativeCandidates) Get(ctx context.Context, name string) (*coordinationv1beta1.LeaseCandidate, error) {
	return n.c.Get(ctx, name, metav1.GetOptions{})
}

func (n nativeCandidates) Create(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, error) {
	return n.c.Create(ctx, lc, metav1.CreateOptions{})
}

func (n nativeCandidates) Update(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, error) {
	return n.c.Update(ctx, lc, metav1.UpdateOptions{})
}

func (n nativeCandidates) Delete(ctx context.Context, name string, pre *metav1.Preconditions) error {
	return n.c.Delete(ctx, name, metav1.DeleteOptions{Preconditions: pre})
}

type nativeLeases struct {
	c interface {
		Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
		Create(context.Context, *coordinationv1.Lease, metav1.CreateOptions) (*coordinationv1.Lease, error)
		Update(context.Context, *coordinationv1.Lease, metav1.UpdateOptions) (*coordinationv1.Lease, error)
		Delete(context.Context, string, metav1.DeleteOptions) error
	}
}

func (n nativeLeases) Get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return n.c.Get(ctx, name, metav1.GetOptions{})
}

func (n nativeLeases) Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return n.c.Create(ctx, lease, metav1.CreateOptions{})
}

func (n nativeLeases) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return n.c.Update(ctx, lease, metav1.UpdateOptions{})
}

func (n nativeLeases) Delete(ctx context.Context, name string, pre *metav1.Preconditions) error {
	return n.c.Delete(ctx, name, metav1.DeleteOptions{Preconditions: pre})
}
