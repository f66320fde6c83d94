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
	"github.com/cle-dev/cle/pkg/shard"
)

// leaseState is one observed version of a Lease.
type leaseState struct {
	at          time.Time
	rv          string
	holder      string
	preferred   string
	transitions int32
	// group is what a group Lease's annotations say (the recorder's group
	// only); nil when they do not parse.
	group *shard.Group
}

// recorder watches every Lease and LeaseCandidate in the namespace, keeps the
// history of each Lease, and checks that leaseTransitions grows whenever the
// holder changes, and that a shard of the group is granted to another owner
// only with a higher token, and its token never goes back.
type recorder struct {
	v       *violations
	checked string // the Lease whose history is checked
	group   string // the group Lease whose assignments are checked

	mu              sync.Mutex
	leases          map[string][]leaseState
	candidateEvents int
	holderChanges   map[string]int
}

func newRecorder(v *violations, checked, group string) *recorder {
	return &recorder{v: v, checked: checked, group: group, leases: map[string][]leaseState{}, holderChanges: map[string]int{}}
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
	if l.Name == r.group {
		g, err := shard.ParseGroup(l.Annotations)
		if err != nil {
			r.v.add("group Lease %s (version %s) does not parse: %v", l.Name, l.ResourceVersion, err)
		} else {
			s.group = &g
		}
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
		if prev.group != nil && s.group != nil {
			r.checkGrants(*prev.group, *s.group)
		}
	}
	r.leases[l.Name] = append(history, s)
}

// checkGrants checks the shards of a group Lease's version against the one
// before it: a shard's token never goes back, and a shard granted to another
// owner (another replica, or the same one in another epoch) has a higher
// token than its last grant. Called with r.mu held.
func (r *recorder) checkGrants(prev, g shard.Group) {
	if prev.Count != g.Count {
		return // a new count starts the shards afresh
	}
	for s := range g.Count {
		was, now := prev.Owners[s], g.Owners[s]
		switch {
		case g.Tokens[s] < prev.Tokens[s]:
			r.v.add("group %s: shard %d's token went back from %d to %d", r.group, s, prev.Tokens[s], g.Tokens[s])
		case now.Member != "" && now != was && g.Tokens[s] <= prev.Tokens[s]:
			if prevOwner := r.lastOwner(s, g.Count); prevOwner != (shard.Owner{}) && prevOwner != now {
				r.v.add("group %s: shard %d granted to %s@%d with token %d, not above %s@%d's %d",
					r.group, s, now.Member, now.Epoch, g.Tokens[s], prevOwner.Member, prevOwner.Epoch, prev.Tokens[s])
			}
		}
	}
}

// lastOwner is the last owner the group's history shows for shard s of
// count, "" if none. Called with r.mu held.
func (r *recorder) lastOwner(s, count int) shard.Owner {
	history := r.leases[r.group]
	for i := len(history) - 1; i >= 0; i-- {
		g := history[i].group
		if g == nil || g.Count != count {
			break
		}
		if o := g.Owners[s]; o.Member != "" {
			return o
		}
	}
	return shard.Owner{}
}

// currentGroup is the group as last observed, and when it was.
func (r *recorder) currentGroup() (shard.Group, time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	history := r.leases[r.group]
	if len(history) == 0 || history[len(history)-1].group == nil {
		return shard.Group{}, time.Time{}, false
	}
	last := history[len(history)-1]
	return *last.group, last.at, true
}

// moves counts the shards of the group granted to another owner than the
// one before it, over the group's history.
func (r *recorder) moves() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	last := map[int]shard.Owner{}
	for _, st := range r.leases[r.group] {
		if st.group == nil {
			continue
		}
		for s, o := range st.group.Owners {
			if o.Member == "" {
				continue
			}
			if was, ok := last[s]; ok && was != o {
				n++
			}
			last[s] = o
		}
	}
	return n
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
