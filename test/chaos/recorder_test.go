package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

// leaseState is one observed version of a Lease.
type leaseState struct {
	at          time.Time
	rv          string
	holder      string
	preferred   string
	transitions int32
}

// recorder watches every Lease and LeaseCandidate in the namespace, keeps the
// history of each Lease, and checks that leaseTransitions grows whenever the
// holder changes.
type recorder struct {
	v       *violations
	checked string // the Lease whose history is checked

	mu              sync.Mutex
	leases          map[string][]leaseState
	candidateEvents int
	holderChanges   map[string]int
}

func newRecorder(v *violations, checked string) *recorder {
	return &recorder{v: v, checked: checked, leases: map[string][]leaseState{}, holderChanges: map[string]int{}}
}

// start runs the informers until ctx is done and waits for their caches.
// They are cle's own (pkg/access), which keep up with kube-apiserver
// restarts where client-go's reflector can fall a minute behind and make a
// prompt election look late.
func (r *recorder) start(ctx context.Context, client kubernetes.Interface, ns string) error {
	acc := access.NewNative(client)
	leases := acc.NewLeaseInformer(ns, 0, nil)
	if _, err := leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observeLease(obj) },
		UpdateFunc: func(_, obj any) { r.observeLease(obj) },
		DeleteFunc: func(obj any) {
			if l, ok := obj.(*coordinationv1.Lease); ok && l.Name == r.checked {
				r.v.add("Lease %s deleted", l.Name)
			}
		},
	}); err != nil {
		return err
	}
	candidates := acc.NewCandidateInformer(ns, 0, nil)
	count := func(obj any) {
		if _, ok := obj.(*coordinationv1beta1.LeaseCandidate); ok {
			r.mu.Lock()
			r.candidateEvents++
			r.mu.Unlock()
		}
	}
	if _, err := candidates.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: count, UpdateFunc: func(_, obj any) { count(obj) }, DeleteFunc: count,
	}); err != nil {
		return err
	}
	go leases.RunWithContext(ctx)
	go candidates.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), leases.HasSynced, candidates.HasSynced) {
		return fmt.Errorf("recorder: caches not synced")
	}
	return nil
}

func (r *recorder) observeLease(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	s := leaseState{
		at:          time.Now(),
		rv:          l.ResourceVersion,
		holder:      ptr.Deref(l.Spec.HolderIdentity, ""),
		preferred:   ptr.Deref(l.Spec.PreferredHolder, ""),
		transitions: ptr.Deref(l.Spec.LeaseTransitions, 0),
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	history := r.leases[l.Name]
	if n := len(history); n > 0 {
		prev := history[n-1]
		if prev.rv == s.rv {
			return // a relist of a version already seen
		}
		// The invariant holds for the Lease cle elects; other Leases (the
		// controller's own, held by client-go's elector, which releases
		// without a new term) are only recorded.
		switch {
		case l.Name != r.checked:
		case s.transitions < prev.transitions:
			r.v.add("Lease %s: leaseTransitions went back from %d to %d", l.Name, prev.transitions, s.transitions)
		case s.holder != prev.holder && s.holder != "" && s.transitions <= prev.transitions:
			// A naming counts the new holder's term; a release to nobody
			// counts none.
			r.v.add("Lease %s: holder changed from %q to %q but leaseTransitions stayed %d", l.Name, prev.holder, s.holder, s.transitions)
		}
		if s.holder != prev.holder {
			r.holderChanges[l.Name]++
		}
	}
	r.leases[l.Name] = append(history, s)
}

// current is the last observed version of the Lease name.
func (r *recorder) current(name string) (leaseState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	history := r.leases[name]
	if len(history) == 0 {
		return leaseState{}, false
	}
	return history[len(history)-1], true
}

func (r *recorder) counts(name string) (versions, holderChanges, candidateEvents int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.leases[name]), r.holderChanges[name], r.candidateEvents
}
