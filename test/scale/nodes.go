package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// nodeLeaseNamespace holds the kubelets' heartbeat Leases.
const nodeLeaseNamespace = "kube-node-lease"

// nodes are node-heartbeat Leases renewed as kubelets renew theirs: an
// update of the last Lease written, every interval, the nodes' phases spread
// evenly over it.
type nodes struct {
	client   kubernetes.Interface
	interval time.Duration
	leases   []*coordinationv1.Lease // the last written, per node
	writes   atomic.Int64
	errors   atomic.Int64
}

// createNodes creates n node Leases with workers parallel writers.
func createNodes(ctx context.Context, client kubernetes.Interface, n int, interval time.Duration, workers int) (*nodes, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nodeLeaseNamespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", nodeLeaseNamespace, err)
	}
	nl := &nodes{client: client, interval: interval, leases: make([]*coordinationv1.Lease, n)}
	err := parallel(ctx, n, workers, func(i int) error {
		name := fmt.Sprintf("node-%05d", i)
		now := metav1.NewMicroTime(time.Now())
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: nodeLeaseNamespace, Name: name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(name),
				LeaseDurationSeconds: ptr.To(int32(4 * interval / time.Second)),
				RenewTime:            &now,
			},
		}
		created, err := client.CoordinationV1().Leases(nodeLeaseNamespace).Create(ctx, lease, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node Lease %s: %w", name, err)
		}
		nl.leases[i] = created
		return nil
	})
	return nl, err
}

// run renews every node Lease each interval until ctx is done.
func (nl *nodes) run(ctx context.Context, wg *sync.WaitGroup, workers int) {
	due := make(chan int, len(nl.leases))
	for range workers {
		wg.Go(func() {
			for i := range due {
				nl.renew(ctx, i)
			}
		})
	}
	wg.Go(func() {
		defer close(due)
		start, n := time.Now(), len(nl.leases)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		next := 0 // renewals sent so far, counting across rounds
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				// Renewal k is due at start + k*interval/n.
				until := int(int64(now.Sub(start)) * int64(n) / int64(nl.interval))
				for ; next < until; next++ {
					select {
					case due <- next % n:
					default:
						nl.errors.Add(1) // the workers are behind: skip this renewal
					}
				}
			}
		}
	})
}

func (nl *nodes) renew(ctx context.Context, i int) {
	lease := nl.leases[i].DeepCopy()
	lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
	leases := nl.client.CoordinationV1().Leases(nodeLeaseNamespace)
	updated, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		// As the kubelet: read it again and retry once.
		var current *coordinationv1.Lease
		if current, err = leases.Get(ctx, lease.Name, metav1.GetOptions{}); err == nil {
			current.Spec.RenewTime = lease.Spec.RenewTime
			updated, err = leases.Update(ctx, current, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			nl.errors.Add(1)
		}
		return
	}
	nl.leases[i] = updated
	nl.writes.Add(1)
}

// parallel runs do(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, do func(int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idx := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range idx {
				if err := do(i); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := range n {
		select {
		case idx <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(idx)
	wg.Wait()
	return context.Cause(ctx)
}
