package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/proof"
	"github.com/cle-dev/cle/pkg/access"
)

// fleet is the benchmark's candidates and holders: for each Lease, one
// LeaseCandidate per emulation version, behaving as pkg/candidate does,
// without a process or a goroutine each. Two informers (LeaseCandidates and
// the Leases of the benchmark's namespaces) tell them what happens; a due
// list per kind of periodic write and a few write queues do the rest.
type fleet struct {
	acc      access.Interface
	cfg      *config
	names    []string // namespaces
	leases   []types.NamespacedName
	versions []string // ascending: versions[0] is the best candidate's

	candidates cache.SharedIndexInformer
	leaseInf   cache.SharedIndexInformer

	answers workqueue.TypedRateLimitingInterface[types.NamespacedName] // LeaseCandidates to write
	holders workqueue.TypedRateLimitingInterface[types.NamespacedName] // Leases to write

	mu        sync.Mutex
	terms     map[types.NamespacedName]*term // Leases a candidate of the fleet holds and has renewed
	correct   map[types.NamespacedName]bool  // Leases held by their best candidate, no preferredHolder
	nCorrect  int
	converged chan struct{} // closed when every Lease is correct (and all candidates exist)
	created   atomic.Bool   // every candidate has been created
	firstSeen map[types.NamespacedName]bool
	// wrongFirstSeen names a few Leases whose first holder was not their
	// best candidate, and that holder, to look up in the controller's log.
	wrongFirstSeen []string
	// firstRV is, for each Lease whose first holder was not its best
	// candidate, the resourceVersion of the Lease's first version with a
	// holder; openedRV is each Lease's at its creation (the controller
	// creates it naming nobody, then names its first holder), createdRV
	// each LeaseCandidate's at its creation. All are etcd revisions, which
	// order every write of the server.
	firstRV   map[types.NamespacedName]int64
	openedRV  map[types.NamespacedName]int64
	createdRV map[types.NamespacedName]int64
	// lat are the fleet's writes' latencies.
	lat latencies

	// Counters, read by snapshot.
	wrongFirst    atomic.Int64 // Leases whose first holder was not their best candidate
	holderChanges atomic.Int64 // holder changes after a Lease's first holder
	pings         atomic.Int64 // LeaseCandidate updates that set a new pingTime (the controller's)
	pingsToLive   atomic.Int64 // of those, pings of a holder whose renewal had not run out when sent
	renewals      atomic.Int64 // LeaseCandidate updates that only moved renewTime (the candidates')
	lcOther       atomic.Int64 // other LeaseCandidate updates
	lcCreates     atomic.Int64
	leaseWrites   atomic.Int64 // Lease writes by the fleet
	conflicts     atomic.Int64 // writes refused for a stale resourceVersion
	lapsed        atomic.Int64 // renewals that landed after the holder's Lease had run out
	writeErrors   atomic.Int64
}

// term is a Lease held by one of the fleet's candidates.
type term struct {
	holder string
	lease  *coordinationv1.Lease // as the holder last wrote it (renewTime set)
	landed time.Time             // when that write returned
	// prev and prevLanded: the renewal before, for a ping decided before
	// lease landed.
	prev       *coordinationv1.Lease
	prevLanded time.Time
}

// next is when the holder renews again.
func (t *term) next(every time.Duration) time.Time { return t.lease.Spec.RenewTime.Add(every) }

func candidateName(lease string, version int) string { return fmt.Sprintf("%s-v%d", lease, version) }

// versionOf returns the index of a candidate of lease named name, or -1.
func versionOf(lease, name string) int {
	rest, ok := strings.CutPrefix(name, lease+"-v")
	if !ok {
		return -1
	}
	var v int
	if _, err := fmt.Sscanf(rest, "%d", &v); err != nil {
		return -1
	}
	return v
}

func newFleet(acc access.Interface, cfg *config, n int) *fleet {
	f := &fleet{
		acc:       acc,
		cfg:       cfg,
		versions:  cfg.versions,
		terms:     map[types.NamespacedName]*term{},
		correct:   map[types.NamespacedName]bool{},
		firstSeen: map[types.NamespacedName]bool{},
		firstRV:   map[types.NamespacedName]int64{},
		openedRV:  map[types.NamespacedName]int64{},
		createdRV: map[types.NamespacedName]int64{},
		converged: make(chan struct{}),
		answers: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "scale_candidates"}),
		holders: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "scale_holders"}),
	}
	for i := range cfg.namespaces {
		f.names = append(f.names, fmt.Sprintf("scale-%d", i))
	}
	for i := range n {
		f.leases = append(f.leases, types.NamespacedName{Namespace: f.names[i%len(f.names)], Name: fmt.Sprintf("lease-%05d", i)})
	}
	inNamespaces := func(o *metav1.ListOptions) { o.FieldSelector = "metadata.namespace!=" + nodeLeaseNamespace }
	f.candidates = acc.NewCandidateInformer("", 0, nil)
	f.leaseInf = acc.NewLeaseInformer("", 0, inNamespaces)
	for _, inf := range []cache.SharedIndexInformer{f.candidates, f.leaseInf} {
		_ = inf.SetTransform(access.StripManagedFields)
	}
	_, _ = f.candidates.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.candidateChanged(nil, obj) },
		UpdateFunc: f.candidateChanged,
	})
	_, _ = f.leaseInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.leaseChanged(obj) },
		UpdateFunc: func(_, obj any) { f.leaseChanged(obj) },
	})
	return f
}

// run starts the informers, the write workers and the periodic renewals;
// it returns once the informers have synced.
func (f *fleet) run(ctx context.Context, wg *sync.WaitGroup, workers int) error {
	wg.Go(func() { f.candidates.RunWithContext(ctx) })
	wg.Go(func() { f.leaseInf.RunWithContext(ctx) })
	wg.Go(func() { <-ctx.Done(); f.answers.ShutDown(); f.holders.ShutDown() })
	if !cache.WaitForCacheSync(ctx.Done(), f.candidates.HasSynced, f.leaseInf.HasSynced) {
		return fmt.Errorf("fleet informers did not sync: %w", ctx.Err())
	}
	for range workers {
		wg.Go(func() { drain(ctx, f.answers, f.answer) })
		wg.Go(func() { drain(ctx, f.holders, f.hold) })
	}
	wg.Go(func() { f.renewTerms(ctx) })
	wg.Go(func() { f.renewCandidates(ctx) })
	return nil
}

// drain processes keys of q with do until q shuts down.
func drain(ctx context.Context, q workqueue.TypedRateLimitingInterface[types.NamespacedName], do func(context.Context, types.NamespacedName) error) {
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		if err := do(ctx, key); err != nil && ctx.Err() == nil {
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

// createCandidates creates every LeaseCandidate, in a random order, with
// workers parallel writers; it returns when all exist.
func (f *fleet) createCandidates(ctx context.Context, rng *rand.Rand, workers int) error {
	type job struct {
		lease   types.NamespacedName
		version int
	}
	jobs := make([]job, 0, len(f.leases)*len(f.versions))
	for _, l := range f.leases {
		for v := range f.versions {
			jobs = append(jobs, job{l, v})
		}
	}
	if f.cfg.order == "random" {
		rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	} else {
		// Leases in a random order, the candidates of each one together
		// (in a random order among them), as the replicas of one
		// component start together.
		n := len(f.versions)
		rng.Shuffle(len(f.leases), func(i, j int) {
			for v := range n {
				jobs[i*n+v], jobs[j*n+v] = jobs[j*n+v], jobs[i*n+v]
			}
		})
		for i := 0; i < len(jobs); i += n {
			group := jobs[i : i+n]
			rng.Shuffle(n, func(a, b int) { group[a], group[b] = group[b], group[a] })
		}
	}
	err := parallel(ctx, len(jobs), workers, func(i int) error {
		j := jobs[i]
		lc := &coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Namespace: j.lease.Namespace, Name: candidateName(j.lease.Name, j.version)},
			Spec: coordinationv1beta1.LeaseCandidateSpec{
				LeaseName:        j.lease.Name,
				BinaryVersion:    f.cfg.binaryVersion,
				EmulationVersion: f.versions[j.version],
				Strategy:         coordinationv1.OldestEmulationVersion,
				RenewTime:        ptr.To(metav1.NewMicroTime(time.Now())),
			},
		}
		if f.cfg.pods {
			p := f.processOf(j.lease.Namespace, lc.Name)
			lc.Annotations = map[string]string{access.InstanceAnnotation: p.Instance, access.PodAnnotation: p.Pod, access.ContainerAnnotation: p.Container}
		}
		sent := time.Now()
		created, err := f.acc.LeaseCandidates(j.lease.Namespace).Create(ctx, lc)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create LeaseCandidate %s/%s: %w", lc.Namespace, lc.Name, err)
		}
		f.lat.add(sent)
		f.lcCreates.Add(1)
		if err == nil {
			rv, _ := strconv.ParseInt(created.ResourceVersion, 10, 64)
			f.mu.Lock()
			f.createdRV[types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name}] = rv
			f.mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return err
	}
	f.created.Store(true)
	f.mu.Lock()
	f.checkConvergedLocked()
	f.mu.Unlock()
	return nil
}

// candidateChanged answers pings, as the library does from its watch, and
// counts who wrote.
func (f *fleet) candidateChanged(oldObj, obj any) {
	lc, ok := obj.(*coordinationv1beta1.LeaseCandidate)
	if !ok {
		return
	}
	if old, ok := oldObj.(*coordinationv1beta1.LeaseCandidate); ok {
		switch {
		case !microEqual(old.Spec.PingTime, lc.Spec.PingTime):
			f.pings.Add(1)
			if f.holdsLive(lc) {
				f.pingsToLive.Add(1)
			}
		case !microEqual(old.Spec.RenewTime, lc.Spec.RenewTime):
			f.renewals.Add(1)
		default:
			f.lcOther.Add(1)
		}
	}
	if pinged(lc) {
		f.answers.Add(types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name})
	}
}

// holdsLive reports whether lc's candidate held its Lease, at the instant
// its ping was sent, with a renewal that had landed and not run out: the
// ping was not needed, whatever the controller's watch showed (the fleet's
// renewTimes and the controller's pingTimes are this machine's clock).
func (f *fleet) holdsLive(lc *coordinationv1beta1.LeaseCandidate) bool {
	if lc.Spec.PingTime == nil {
		return false
	}
	at := lc.Spec.PingTime.Time
	f.mu.Lock()
	t := f.terms[types.NamespacedName{Namespace: lc.Namespace, Name: lc.Spec.LeaseName}]
	f.mu.Unlock()
	if t == nil || t.holder != lc.Name {
		return false
	}
	lease := t.lease
	if t.landed.After(at) {
		if t.prev == nil || t.prevLanded.After(at) {
			return false
		}
		lease = t.prev
	}
	return at.Before(runsOut(lease))
}

// runsOut is when a renewal the fleet wrote runs out: its renewTime plus its
// duration, on this machine's clock.
func runsOut(lease *coordinationv1.Lease) time.Time {
	return lease.Spec.RenewTime.Add(time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, 0)) * time.Second)
}

func microEqual(a, b *metav1.MicroTime) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}

func pinged(lc *coordinationv1beta1.LeaseCandidate) bool {
	return lc.Spec.PingTime != nil && (lc.Spec.RenewTime == nil || lc.Spec.RenewTime.Before(lc.Spec.PingTime))
}

// answer writes a pinged candidate's renewTime = max(now, pingTime), or,
// when key is due for its periodic renewal (renew is set), now.
func (f *fleet) answer(ctx context.Context, key types.NamespacedName) error {
	obj, exists, err := f.candidates.GetStore().GetByKey(key.String())
	if err != nil || !exists {
		return err
	}
	lc := obj.(*coordinationv1beta1.LeaseCandidate)
	renewal := lc.Spec.RenewTime == nil || time.Since(lc.Spec.RenewTime.Time) >= f.cfg.candidateRenew
	if !pinged(lc) && !renewal {
		return nil
	}
	now := time.Now()
	if lc.Spec.PingTime != nil && lc.Spec.PingTime.After(now) {
		now = lc.Spec.PingTime.Time
	}
	lc = lc.DeepCopy()
	lc.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	sent := time.Now()
	_, err = f.acc.LeaseCandidates(key.Namespace).Update(ctx, lc)
	f.lat.add(sent)
	if err != nil {
		if apierrors.IsConflict(err) {
			f.conflicts.Add(1)
			return nil // the watch brings the newer object
		}
		if apierrors.IsNotFound(err) {
			return nil
		}
		f.writeErrors.Add(1)
		return fmt.Errorf("renew LeaseCandidate %s: %w", key, err)
	}
	return nil
}

// renewCandidates renews every candidate's LeaseCandidate once per
// --candidate-renew-interval after its last write, as the library does when
// nobody pings it.
func (f *fleet) renewCandidates(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, obj := range f.candidates.GetStore().List() {
			lc := obj.(*coordinationv1beta1.LeaseCandidate)
			if lc.Spec.RenewTime != nil && time.Since(lc.Spec.RenewTime.Time) >= f.cfg.candidateRenew {
				f.answers.Add(types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name})
			}
		}
	}
}

// leaseChanged is what the holders of the fleet see of a Lease: a candidate
// named holder starts its term, one asked to hand over does, and the
// benchmark's convergence is tracked.
func (f *fleet) leaseChanged(obj any) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: lease.Namespace, Name: lease.Name}
	holder, preferred := ptr.Deref(lease.Spec.HolderIdentity, ""), ptr.Deref(lease.Spec.PreferredHolder, "")
	rv, _ := strconv.ParseInt(lease.ResourceVersion, 10, 64)
	if holder == "" {
		// The watch began before the fleet's Leases were created: its
		// first version of a Lease is the creation.
		f.mu.Lock()
		if _, ok := f.openedRV[key]; !ok && !f.firstSeen[key] {
			f.openedRV[key] = rv
		}
		f.mu.Unlock()
		return
	}
	v := versionOf(lease.Name, holder)
	if v < 0 {
		return // not the fleet's
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.openedRV[key]; !ok {
		f.openedRV[key] = rv
	}
	if !f.firstSeen[key] {
		f.firstSeen[key] = true
		if v != 0 {
			f.firstRV[key] = rv
			f.wrongFirst.Add(1)
			if len(f.wrongFirstSeen) < maxWrongFirstShown {
				f.wrongFirstSeen = append(f.wrongFirstSeen, fmt.Sprintf("%s first held by %s", key, holder))
			}
		}
	} else if t := f.terms[key]; t != nil && t.holder != holder {
		f.holderChanges.Add(1)
	}
	ok = v == 0 && preferred == ""
	if ok != f.correct[key] {
		f.correct[key] = ok
		if ok {
			f.nCorrect++
		} else {
			f.nCorrect--
		}
		f.checkConvergedLocked()
	}
	if t := f.terms[key]; (preferred != "" && preferred != holder) || t == nil || t.holder != holder {
		f.holders.Add(key)
	}
}

func (f *fleet) checkConvergedLocked() {
	if f.created.Load() && f.nCorrect == len(f.leases) {
		select {
		case <-f.converged:
		default:
			close(f.converged)
		}
	}
}

// hold writes what the holder of a Lease does next: hand it over to the
// preferred holder, start its term by renewing it, or renew it when due.
// Like the library, a holder renews the Lease as it last wrote it unless the
// watch has shown a newer one (a loaded server's watch lags its writes by
// more than a renewal interval), and answers a conflict by reading the Lease
// and deciding again, once.
func (f *fleet) hold(ctx context.Context, key types.NamespacedName) error {
	obj, exists, err := f.leaseInf.GetStore().GetByKey(key.String())
	if err != nil || !exists {
		return err
	}
	lease := obj.(*coordinationv1.Lease)
	f.mu.Lock()
	t := f.terms[key]
	f.mu.Unlock()
	if t != nil && newer(t.lease, lease) {
		lease = t.lease
	}
	write, holder, ok := f.nextWrite(lease, t, time.Now())
	if !ok {
		return nil
	}
	sent := time.Now()
	updated, err := f.acc.Leases(key.Namespace).Update(ctx, write)
	f.lat.add(sent)
	if apierrors.IsConflict(err) {
		f.conflicts.Add(1)
		var fresh *coordinationv1.Lease
		if fresh, err = f.acc.Leases(key.Namespace).Get(ctx, key.Name); err == nil {
			if write, holder, ok = f.nextWrite(fresh, t, time.Now()); !ok {
				return nil
			}
			updated, err = f.acc.Leases(key.Namespace).Update(ctx, write)
		}
	}
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // the watch brings the newer object
		}
		f.writeErrors.Add(1)
		return fmt.Errorf("write Lease %s: %w", key, err)
	}
	f.leaseWrites.Add(1)
	if t != nil && t.holder == holder && ptr.Deref(updated.Spec.HolderIdentity, "") == holder {
		// The server took this renewal only after the holder's previous
		// one had run out: the Lease really expired, whatever any
		// controller saw, and an election was due.
		if time.Now().After(runsOut(t.lease)) {
			f.lapsed.Add(1)
		}
	}
	f.mu.Lock()
	if ptr.Deref(updated.Spec.HolderIdentity, "") == holder {
		nt := &term{holder: holder, lease: updated, landed: time.Now()}
		if t := f.terms[key]; t != nil && t.holder == holder {
			nt.prev, nt.prevLanded = t.lease, t.landed
		}
		f.terms[key] = nt
	} else {
		delete(f.terms, key) // the new holder starts its own term when it sees the Lease
	}
	f.mu.Unlock()
	return nil
}

// nextWrite is the write the holder of lease makes at now, given the term
// the fleet knows for it (nil if none), and the holder it acts for; ok is
// false when nothing is due.
func (f *fleet) nextWrite(lease *coordinationv1.Lease, t *term, now time.Time) (_ *coordinationv1.Lease, holder string, ok bool) {
	holder, preferred := ptr.Deref(lease.Spec.HolderIdentity, ""), ptr.Deref(lease.Spec.PreferredHolder, "")
	if versionOf(lease.Name, holder) < 0 {
		return nil, "", false
	}
	lease = lease.DeepCopy()
	micro := metav1.NewMicroTime(now)
	switch {
	case preferred != "" && preferred != holder:
		lease.Spec.HolderIdentity = ptr.To(preferred)
		lease.Spec.PreferredHolder = nil
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
		lease.Spec.AcquireTime = &micro
	case t == nil || t.holder != holder || !now.Before(t.next(f.cfg.holderRenew)):
	default:
		return nil, "", false
	}
	lease.Spec.RenewTime = &micro
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(f.cfg.holderDuration / time.Second))
	if f.cfg.pods {
		proof.Stamp(lease, f.processOf(lease.Namespace, holder))
	}
	return lease, holder, true
}

// processOf is the process of candidate name (--pods): its Pod, named
// after it, and an instance ID derived from the name.
func (f *fleet) processOf(ns, name string) proof.Process {
	sum := sha256.Sum256([]byte(ns + "/" + name))
	return proof.Process{Instance: hex.EncodeToString(sum[:16]), Pod: proof.PodOf(ns, name), Container: "candidate"}
}

// createPods creates a Pod for each candidate (--pods), with workers
// parallel writers: Pending, as nothing schedules them, which is all the
// controller's Pod watch needs to list and watch them.
func (f *fleet) createPods(ctx context.Context, client kubernetes.Interface, workers int) error {
	n := len(f.versions)
	return parallel(ctx, len(f.leases)*n, workers, func(i int) error {
		l := f.leases[i/n]
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: candidateName(l.Name, i%n), Labels: map[string]string{"app": l.Name}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "candidate", Image: "scale.local/candidate:1",
			}}},
		}
		if _, err := client.CoreV1().Pods(l.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		return nil
	})
}

// newer reports whether a is a later version of the Lease than b. The
// benchmark's server is backed by etcd, whose resourceVersions are revisions;
// anything else is taken as not newer.
func newer(a, b *coordinationv1.Lease) bool {
	ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
	return errA == nil && errB == nil && ra > rb
}

// renewTerms queues every term whose renewal is due.
func (f *fleet) renewTerms(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var due []types.NamespacedName
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		due = due[:0]
		f.mu.Lock()
		for key, t := range f.terms {
			if !now.Before(t.next(f.cfg.holderRenew)) {
				due = append(due, key)
			}
		}
		f.mu.Unlock()
		for _, key := range due {
			f.holders.Add(key)
		}
	}
}

// maxWrongFirstShown bounds the Leases with a wrong first holder that the
// report names.
const maxWrongFirstShown = 5

// wrongFirstHolders names up to maxWrongFirstShown Leases whose first
// holder was not their best candidate.
func (f *fleet) wrongFirstHolders() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.wrongFirstSeen)
}

// wrongFirstKinds tells the Leases whose first holder was not their best
// candidate apart by when the server applied the best candidate's
// registration (resourceVersions order the server's writes): early, before
// the Lease was created, so that the controller had to consider it;
// between, after the creation but before the first holder was named (the
// election was under way: the candidate joined it late); late, after the
// first holder was named, or unknown. examples names a few early ones.
func (f *fleet) wrongFirstKinds() (early, between, late int, examples []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range slices.SortedFunc(maps.Keys(f.firstRV), func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) }) {
		first, opened := f.firstRV[key], f.openedRV[key]
		best := types.NamespacedName{Namespace: key.Namespace, Name: candidateName(key.Name, 0)}
		created, ok := f.createdRV[best]
		switch {
		case ok && created < opened:
			early++
			if len(examples) < maxWrongFirstShown {
				examples = append(examples, fmt.Sprintf("%s: the best candidate registered at resourceVersion %d, the Lease was created at %d, its first holder named at %d", key, created, opened, first))
			}
		case ok && created < first:
			between++
		default:
			late++
		}
	}
	return early, between, late, examples
}

// counts is a snapshot of the fleet's counters.
type counts struct {
	at                                  time.Time
	pings, renewals, lcOther, creates   int64
	pingsToLive                         int64
	leaseWrites, conflicts, writeErrors int64
	lapsed                              int64
	wrongFirst, holderChanges           int64
}

func (f *fleet) snapshot() counts {
	return counts{
		at: time.Now(), pings: f.pings.Load(), pingsToLive: f.pingsToLive.Load(), renewals: f.renewals.Load(), lcOther: f.lcOther.Load(),
		creates: f.lcCreates.Load(), leaseWrites: f.leaseWrites.Load(), conflicts: f.conflicts.Load(), writeErrors: f.writeErrors.Load(),
		lapsed:     f.lapsed.Load(),
		wrongFirst: f.wrongFirst.Load(), holderChanges: f.holderChanges.Load(),
	}
}

// wrongHolders lists up to max Leases not yet held by their best candidate,
// for the report of a run that did not converge.
func (f *fleet) wrongHolders(max int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, l := range f.leases {
		if !f.correct[l] {
			obj, exists, _ := f.leaseInf.GetStore().GetByKey(l.String())
			desc := "no Lease"
			if exists {
				lease := obj.(*coordinationv1.Lease)
				desc = fmt.Sprintf("holder %q preferred %q", ptr.Deref(lease.Spec.HolderIdentity, ""), ptr.Deref(lease.Spec.PreferredHolder, ""))
			}
			out = append(out, l.String()+": "+desc)
			if len(out) == max {
				break
			}
		}
	}
	slices.Sort(out)
	return out
}
