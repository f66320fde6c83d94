package access

import (
	"context"
	"fmt"
	"time"

	coordinationv1alpha2 "k8s.io/api/coordination/v1alpha2"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedv1alpha2 "k8s.io/client-go/kubernetes/typed/coordination/v1alpha2"
	"k8s.io/client-go/tools/cache"
)

// v1alpha2CandidateAPI serves native mode on servers that serve
// coordination.k8s.io/v1alpha2 LeaseCandidates but not v1beta1 (Kubernetes
// 1.32, or a newer server where only v1alpha2 was turned on). The two
// versions have the same fields; objects are converted at the edge.
var v1alpha2CandidateAPI = nativeCandidateAPI{
	groupVersion: coordinationv1alpha2.SchemeGroupVersion.String(),
	client: func(c kubernetes.Interface, ns string) CandidateClient {
		return v1alpha2Candidates{c.CoordinationV1alpha2().LeaseCandidates(ns)}
	},
	informer: func(c kubernetes.Interface, ns string, resync time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
		lc := c.CoordinationV1alpha2().LeaseCandidates(ns)
		return newInformer(&coordinationv1beta1.LeaseCandidate{}, resync, tweak,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				list, err := lc.List(ctx, o)
				if err != nil {
					return nil, err
				}
				out := &coordinationv1beta1.LeaseCandidateList{ListMeta: list.ListMeta, Items: make([]coordinationv1beta1.LeaseCandidate, len(list.Items))}
				for i := range list.Items {
					out.Items[i] = *v1alpha2ToBeta(&list.Items[i])
				}
				return out, nil
			},
			func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				w, err := lc.Watch(ctx, o)
				if err != nil {
					return nil, err
				}
				return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
					if in, ok := e.Object.(*coordinationv1alpha2.LeaseCandidate); ok {
						e.Object = v1alpha2ToBeta(in)
					}
					return e, true
				}), nil
			})
	},
}

type v1alpha2Candidates struct {
	c typedv1alpha2.LeaseCandidateInterface
}

func (v v1alpha2Candidates) Get(ctx context.Context, name string) (*coordinationv1beta1.LeaseCandidate, error) {
	return convertResult(v.c.Get(ctx, name, metav1.GetOptions{}))
}

func (v v1alpha2Candidates) Create(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, error) {
	return convertResult(v.c.Create(ctx, betaToV1alpha2(lc), metav1.CreateOptions{}))
}

func (v v1alpha2Candidates) Update(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, error) {
	return convertResult(v.c.Update(ctx, betaToV1alpha2(lc), metav1.UpdateOptions{}))
}

func (v v1alpha2Candidates) Delete(ctx context.Context, name string, pre *metav1.Preconditions) error {
	return v.c.Delete(ctx, name, metav1.DeleteOptions{Preconditions: pre})
}

func convertResult(lc *coordinationv1alpha2.LeaseCandidate, err error) (*coordinationv1beta1.LeaseCandidate, error) {
	if err != nil {
		return nil, err
	}
	if lc == nil {
		return nil, fmt.Errorf("the server returned no LeaseCandidate")
	}
	return v1alpha2ToBeta(lc), nil
}

// v1alpha2ToBeta converts field by field; the TypeMeta stays empty, as on
// objects decoded by a typed client.
func v1alpha2ToBeta(in *coordinationv1alpha2.LeaseCandidate) *coordinationv1beta1.LeaseCandidate {
	return &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        in.Spec.LeaseName,
			PingTime:         in.Spec.PingTime.DeepCopy(),
			RenewTime:        in.Spec.RenewTime.DeepCopy(),
			BinaryVersion:    in.Spec.BinaryVersion,
			EmulationVersion: in.Spec.EmulationVersion,
			Strategy:         in.Spec.Strategy,
		},
	}
}

func betaToV1alpha2(in *coordinationv1beta1.LeaseCandidate) *coordinationv1alpha2.LeaseCandidate {
	return &coordinationv1alpha2.LeaseCandidate{
		ObjectMeta: *in.ObjectMeta.DeepCopy(),
		Spec: coordinationv1alpha2.LeaseCandidateSpec{
			LeaseName:        in.Spec.LeaseName,
			PingTime:         in.Spec.PingTime.DeepCopy(),
			RenewTime:        in.Spec.RenewTime.DeepCopy(),
			BinaryVersion:    in.Spec.BinaryVersion,
			EmulationVersion: in.Spec.EmulationVersion,
			Strategy:         in.Spec.Strategy,
		},
	}
}
