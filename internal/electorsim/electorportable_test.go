package electorsim_test

import (
	"context"
	"fmt"
	"sync"

	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	coordinationv1beta1client "k8s.io/client-go/kubernetes/typed/coordination/v1beta1"

	"github.com/cle-dev/cle/pkg/access"
)

// The model server in portable mode: the processes reach LeaseCandidates
// as portable mode does, as the cle.dev custom resource through a dynamic
// client, and the server drops the coordinated fields of Leases (spec
// .strategy and .preferredHolder), as a server with the
// CoordinatedLeaderElection gate off does. The custom resource is kept as
// the LeaseCandidate it converts to (access.CandidateFromUnstructured), so
// that the server's rules and faults are the same in both modes; what runs
// of cle is pkg/access's portable translation, both ways.

// clients are the clients of a process that cut allows: in portable mode
// with a dynamic client for the custom resource.
func (v *electorServer) clients(cut *cutoff) access.Clients {
	c := v.client(cut)
	if !v.portable {
		return access.Clients{Kube: c}
	}
	return access.Clients{Kube: c, Dynamic: electorDynamic{c.(electorClient)}}
}

// access is a candidate's access layer in the run's mode.
func (v *electorServer) access(cut *cutoff) access.Interface {
	clients := v.clients(cut)
	if !v.portable {
		return access.NewNative(clients.Kube)
	}
	acc, err := access.NewPortable(clients)
	if err != nil {
		panic(err) // both clients are there
	}
	return acc
}

// electorDynamic is a dynamic client serving the custom resource alone,
// over a client's typed LeaseCandidate requests (which take their time and
// meet the run's faults).
type electorDynamic struct{ c electorClient }

func (d electorDynamic) Resource(gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	if gvr != access.CandidateResource {
		panic(fmt.Sprintf("the model server serves no %s", gvr))
	}
	return electorCRD{d: d}
}

// electorCRD is the custom resource; only namespaced requests are made.
type electorCRD struct {
	dynamic.NamespaceableResourceInterface // not used: nil
	d                                      electorDynamic
}

func (r electorCRD) Namespace(ns string) dynamic.ResourceInterface {
	return electorCRDIn{typed: r.d.c.CoordinationV1beta1().LeaseCandidates(ns)}
}

// electorCRDIn is the custom resource in one namespace: Get, List, Watch,
// Create, Update and Delete, what portable mode uses.
type electorCRDIn struct {
	dynamic.ResourceInterface // not used: nil
	typed                     coordinationv1beta1client.LeaseCandidateInterface
}

func (r electorCRDIn) Get(ctx context.Context, name string, o metav1.GetOptions, _ ...string) (*unstructured.Unstructured, error) {
	lc, err := r.typed.Get(ctx, name, o)
	if err != nil {
		return nil, err
	}
	return access.CandidateToUnstructured(lc)
}

func (r electorCRDIn) List(ctx context.Context, o metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	list, err := r.typed.List(ctx, o)
	if err != nil {
		return nil, err
	}
	out := &unstructured.UnstructuredList{}
	out.SetGroupVersionKind(access.CandidateResource.GroupVersion().WithKind(access.CandidateKind + "List"))
	out.SetResourceVersion(list.ResourceVersion)
	for i := range list.Items {
		u, err := access.CandidateToUnstructured(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, *u)
	}
	return out, nil
}

func (r electorCRDIn) Create(ctx context.Context, u *unstructured.Unstructured, o metav1.CreateOptions, _ ...string) (*unstructured.Unstructured, error) {
	lc, err := access.CandidateFromUnstructured(u)
	if err != nil {
		return nil, err
	}
	if lc, err = r.typed.Create(ctx, lc, o); err != nil {
		return nil, err
	}
	return access.CandidateToUnstructured(lc)
}

func (r electorCRDIn) Update(ctx context.Context, u *unstructured.Unstructured, o metav1.UpdateOptions, _ ...string) (*unstructured.Unstructured, error) {
	lc, err := access.CandidateFromUnstructured(u)
	if err != nil {
		return nil, err
	}
	if lc, err = r.typed.Update(ctx, lc, o); err != nil {
		return nil, err
	}
	return access.CandidateToUnstructured(lc)
}

func (r electorCRDIn) Delete(ctx context.Context, name string, o metav1.DeleteOptions, _ ...string) error {
	return r.typed.Delete(ctx, name, o)
}

func (r electorCRDIn) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	w, err := r.typed.Watch(ctx, o)
	if err != nil {
		return nil, err
	}
	u := &unstructuredWatch{in: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go u.pump()
	return u, nil
}

// unstructuredWatch is a watch of LeaseCandidates as the custom resource's
// events; its goroutine ends when either side stops.
type unstructuredWatch struct {
	in   watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (w *unstructuredWatch) pump() {
	defer close(w.out)
	for {
		var ev watch.Event
		select {
		case e, ok := <-w.in.ResultChan():
			if !ok {
				return
			}
			ev = e
		case <-w.stop:
			return
		}
		if lc, ok := ev.Object.(*coordinationv1beta1.LeaseCandidate); ok {
			u, err := access.CandidateToUnstructured(lc)
			if err != nil {
				panic(err) // a LeaseCandidate always converts
			}
			ev.Object = u
		}
		select {
		case w.out <- ev:
		case <-w.stop:
			return
		}
	}
}

func (w *unstructuredWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.in.Stop()
	})
}

func (w *unstructuredWatch) ResultChan() <-chan watch.Event { return w.out }
