package controller

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/promtest"
	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/pkg/strategy"
)

// TestMalformed writes, through kube-apiserver, every odd object the API
// accepts (and tries the ones it does not), with a cle-controller process
// watching: for each, the controller elects the winner pkg/strategy ranks
// first, or refuses as the design says, with the Events that say why; and
// through it all the process keeps running, logs no panic, and has no Event
// rejected by the server.
func TestMalformed(t *testing.T) {
	bin := buildController(t)
	forEachMode(t, func(t *testing.T, m apiMode) { testMalformed(t, m, bin) })
}

const oev = coordinationv1.OldestEmulationVersion

// malformed is the environment of TestMalformed in one mode: a controller
// process watching two namespaces.
type malformed struct {
	e, other *env // the two namespaces the controller watches
	r        *replica

	mu         sync.Mutex
	candidates int // candidates that exist in both namespaces, for the barrier
}

func testMalformed(t *testing.T, m apiMode, bin string) {
	x := &malformed{e: newEnv(t, m, m.server.CreateNamespace(t)), other: newEnv(t, m, m.server.CreateNamespace(t))}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := m.server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	// Candidates count as alive for 10 minutes after the controller saw them
	// created, so that no test here depends on answering pings, and -v=4
	// logs the Leases it leaves alone.
	x.r = startReplica(t, x.e.mode.server, bin, kubeconfig, x.e.ns, "malformed", "--namespaces="+x.other.ns,
		"--candidate-freshness=10m", "-v=4")
	x.at(t, x.e).waitLease("cle-controller", 30*time.Second, "the controller leading", holderIs("malformed"))
	x.r.waitLog(t, "caches synced", regexp.QuoteMeta(`"Caches synced; electing"`))

	t.Run("pingTime without renewTime", x.pingWithoutRenew)
	t.Run("nil holderIdentity", x.nilHolder)
	t.Run("leaseDurationSeconds", x.leaseDurations)
	t.Run("leaseTransitions at the int32 maximum", x.maxTransitions)
	t.Run("shapes the API rejects", x.rejected)
	t.Run("third-party strategy", x.thirdParty)
	t.Run("mixed strategies", x.mixedStrategies)
	t.Run("invalid under the strategy", x.invalidUnderStrategy)
	t.Run("candidates in another namespace", x.otherNamespace)
	t.Run("same-second ties", x.ties)
	t.Run("1000 candidates", x.crowd)

	x.expectHealthy(t)
}

// ---- the cases ----

// A candidate the controller pinged but that never renewed (or one written so
// by hand): renewTime nil, pingTime set. Seen created, it is alive, and leads.
func (x *malformed) pingWithoutRenew(t *testing.T) {
	x.create(t, x.e, &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: "pinged"},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName: "ping-no-renew", BinaryVersion: "1.36.0", EmulationVersion: "1.35.0", Strategy: oev,
			PingTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Minute))),
		},
	})
	x.create(t, x.e, newCandidate("unpinged", "ping-no-renew", "1.36.0", "1.36.0", oev))
	lease := x.at(t, x.e).waitLease("ping-no-renew", 30*time.Second, "holder pinged", holderIs("pinged"))
	if s := ptr.Deref(lease.Spec.Strategy, ""); s != oev {
		t.Errorf("strategy %q, want %q", s, oev)
	}
	x.expectEvent(t, x.e, "ping-no-renew", controller.ReasonLeaderElected, "Elected pinged")
}

// A Lease with no holderIdentity at all (nor acquireTime nor
// leaseTransitions): the best candidate is named holder in term 1.
func (x *malformed) nilHolder(t *testing.T) {
	x.createLease(t, x.e, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "nil-holder"},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](15), Strategy: ptr.To(oev)},
	})
	// The best first: whenever the gathering window closes, it is there.
	x.create(t, x.e, newCandidate("nil-best", "nil-holder", "1.36.0", "1.34.0", oev))
	x.create(t, x.e, newCandidate("nil-worse", "nil-holder", "1.36.0", "1.36.0", oev))
	lease := x.at(t, x.e).waitLease("nil-holder", 30*time.Second, "holder nil-best", holderIs("nil-best"))
	if n := ptr.Deref(lease.Spec.LeaseTransitions, -1); n != 1 {
		t.Errorf("leaseTransitions %d, want 1", n)
	}
	x.expectEvent(t, x.e, "nil-holder", controller.ReasonLeaderElected, "Elected nil-best")
}

// leaseDurationSeconds: 0 is rejected by the API (so the controller never sees
// it); 2^31-1 is accepted. Vacant, the Lease is elected (for the
// controller's lease duration, not the last holder's); held by a
// component outside coordinated election, it is left alone (it never expires
// in practice); held by a worse candidate, the better one is preferred.
func (x *malformed) leaseDurations(t *testing.T) {
	_, err := x.e.acc.Leases(x.e.ns).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "zero-duration"},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](0)},
	})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "leaseDurationSeconds") {
		t.Errorf("create a Lease with leaseDurationSeconds 0: %v, want the API to reject it as invalid", err)
	}

	huge := ptr.To[int32](math.MaxInt32)
	t.Run("vacant", func(t *testing.T) {
		x.createLease(t, x.e, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "huge-vacant"},
			Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: huge},
		})
		x.create(t, x.e, newCandidate("vacant-a", "huge-vacant", "1.36.0", "1.36.0", oev))
		lease := x.at(t, x.e).waitLease("huge-vacant", 30*time.Second, "holder vacant-a", holderIs("vacant-a"))
		// The duration a vacant Lease carries was its last holder's: the
		// holder named now gets the controller's until its first renewal.
		if d := ptr.Deref(lease.Spec.LeaseDurationSeconds, 0); d != int32(controller.DefaultLeaseDuration/time.Second) {
			t.Errorf("leaseDurationSeconds %d, want the controller's %s", d, controller.DefaultLeaseDuration)
		}
		x.expectEvent(t, x.e, "huge-vacant", controller.ReasonLeaderElected, "Elected vacant-a")
	})
	t.Run("held by a non-candidate", func(t *testing.T) {
		before := x.createLease(t, x.e, heldLease("huge-outsider", "outsider", huge))
		x.create(t, x.e, newCandidate("outsider-rival", "huge-outsider", "1.36.0", "1.34.0", oev))
		x.r.waitLog(t, "huge-outsider left to its holder", regexp.QuoteMeta(`"Lease held by a non-candidate; waiting for release or expiry"`),
			regexp.QuoteMeta(fmt.Sprintf(`lease="%s/huge-outsider"`, x.e.ns)))
		x.expectUnchanged(t, x.e, before)
		x.expectNoEvents(t, x.e, "huge-outsider")
	})
	t.Run("held by a worse candidate", func(t *testing.T) {
		before := x.createLease(t, x.e, heldLease("huge-worse", "huge-worse-w", huge))
		x.create(t, x.e, newCandidate("huge-worse-w", "huge-worse", "1.36.0", "1.36.0", oev))
		x.create(t, x.e, newCandidate("huge-worse-b", "huge-worse", "1.36.0", "1.35.0", oev))
		// A live holder hands over only to a candidate that has written
		// since it registered.
		x.at(t, x.e).answerPings("huge-worse-b")
		lease := x.at(t, x.e).waitLease("huge-worse", 30*time.Second, "preferredHolder huge-worse-b", func(l *coordinationv1.Lease) bool {
			return ptr.Deref(l.Spec.PreferredHolder, "") == "huge-worse-b"
		})
		if !holderIs("huge-worse-w")(lease) || !ptr.Equal(lease.Spec.LeaseTransitions, before.Spec.LeaseTransitions) {
			t.Errorf("%s, want huge-worse-w still holding in term %d until it hands over", describe(lease), ptr.Deref(before.Spec.LeaseTransitions, 0))
		}
		x.expectEvent(t, x.e, "huge-worse", controller.ReasonPreferredHolderSet, "huge-worse-b is better than holder huge-worse-w")
	})
}

// leaseTransitions at 2^31-1 on a vacant Lease: no term can be numbered above
// it, so nothing is elected, and a Warning Event says why.
func (x *malformed) maxTransitions(t *testing.T) {
	before := x.createLease(t, x.e, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "max-term"},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](15), LeaseTransitions: ptr.To[int32](math.MaxInt32)},
	})
	x.create(t, x.e, newCandidate("max-term-a", "max-term", "1.36.0", "1.36.0", oev))
	x.expectEvent(t, x.e, "max-term", controller.ReasonTermsExhausted, "Cannot elect max-term-a")
	x.expectUnchanged(t, x.e, before)
}

// Shapes near the malformed ones that the API refuses, so that the controller
// never meets them.
func (x *malformed) rejected(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		cand  *coordinationv1beta1.LeaseCandidate
		field string
	}{
		{name: "negative leaseTransitions", field: "leaseTransitions", lease: &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "negative-term"},
			Spec:       coordinationv1.LeaseSpec{LeaseTransitions: ptr.To[int32](-1)},
		}},
		{name: "negative leaseDurationSeconds", field: "leaseDurationSeconds", lease: &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "negative-duration"},
			Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](-15)},
		}},
		{name: "no emulationVersion under OldestEmulationVersion", field: "emulationVersion",
			cand: newCandidate("rejected-no-emulation", "rejected", "1.36.0", "", oev)},
		{name: "binaryVersion below emulationVersion", field: "binaryVersion",
			cand: newCandidate("rejected-inverted", "rejected", "1.35.0", "1.36.0", oev)},
		{name: "binaryVersion not semver", field: "binaryVersion",
			cand: newCandidate("rejected-garbage", "rejected", "v1.36", "1.36.0", oev)},
		{name: "unprefixed third-party strategy", field: "strategy",
			cand: newCandidate("rejected-unprefixed", "rejected", "1.36.0", "1.36.0", "Custom")},
	} {
		var err error
		if tc.lease != nil {
			_, err = x.e.acc.Leases(x.e.ns).Create(ctx, tc.lease)
		} else {
			_, err = x.e.acc.LeaseCandidates(x.e.ns).Create(ctx, tc.cand)
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want the API to reject it as invalid in %s", tc.name, err, tc.field)
		}
	}
}

// Candidates that all ask for a strategy no registered strategy handles: the
// Lease belongs to another controller, which is not there. No Lease, no
// ping, no Event.
func (x *malformed) thirdParty(t *testing.T) {
	for _, name := range []string{"custom-x", "custom-y"} {
		x.create(t, x.e, newCandidate(name, "third-party", "1.36.0", "1.36.0", "example.com/custom"))
	}
	x.r.waitLog(t, "third-party left alone", regexp.QuoteMeta(`"Strategy not handled here; leaving the Lease alone"`),
		regexp.QuoteMeta(fmt.Sprintf(`lease="%s/third-party"`, x.e.ns)))
	x.expectNoLease(t, x.e, "third-party")
	for _, name := range []string{"custom-x", "custom-y"} {
		if lc, err := x.e.acc.LeaseCandidates(x.e.ns).Get(context.Background(), name); err != nil || lc.Spec.PingTime != nil {
			t.Errorf("candidate %s: %v, pingTime %v; want it never pinged", name, err, lc.Spec.PingTime)
		}
	}
	x.expectNoEvents(t, x.e, "third-party")
}

// Mixed strategies: at the highest binary version they are a conflict (no
// Lease, a Warning); below it they are outvoted, and every candidate is
// ranked under the newest binaries' strategy.
func (x *malformed) mixedStrategies(t *testing.T) {
	t.Run("at the top binary version", func(t *testing.T) {
		x.create(t, x.e, newCandidate("top-o", "mixed-top", "1.36.0", "1.35.0", oev))
		x.create(t, x.e, newCandidate("top-c", "mixed-top", "1.36.0", "1.36.0", "example.com/custom"))
		x.create(t, x.e, newCandidate("top-p", "mixed-top", "1.36.0+build.7", "1.34.0", strategy.PriorityName))
		// The first conflict the controller sees is between top-c and top-o,
		// or among all three. A later, wider one on the same unchanged Lease
		// is folded into the first Event by the recorder (counted, with the
		// first note); the log says it.
		x.expectEvent(t, x.e, "mixed-top", controller.ReasonStrategyConflict, `top-c: "example.com/custom", top-o: "OldestEmulationVersion"`)
		x.r.waitLog(t, "the conflict among three", regexp.QuoteMeta(`"Strategy conflict; not electing"`),
			regexp.QuoteMeta(fmt.Sprintf(`lease="%s/mixed-top"`, x.e.ns)), regexp.QuoteMeta(`top-p: \"cle.dev/Priority\"`))
		// top-o alone may have been elected before the others appeared (the
		// gathering window may close between two creations); a Lease
		// created before the conflict names nobody (its first election
		// opened it) or the candidate that came first.
		lease, err := x.e.acc.Leases(x.e.ns).Get(context.Background(), "mixed-top")
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			t.Fatal(err)
		case !holderIs("top-o")(lease) && !holderIs("")(lease):
			t.Errorf("%s, want no Lease, one naming nobody, or one naming top-o (elected before the conflict)", describe(lease))
		}
	})
	t.Run("below the top binary version", func(t *testing.T) {
		// The winner first: it leads as soon as the Lease is elected.
		x.create(t, x.e, newCandidate("below-old", "mixed-below", "1.35.0", "1.35.0", "example.com/custom"))
		x.create(t, x.e, newCandidate("below-new", "mixed-below", "1.36.0", "1.35.0", oev))
		x.create(t, x.e, newCandidate("below-prio", "mixed-below", "1.35.0", "1.35.0", strategy.PriorityName))
		lease := x.at(t, x.e).waitLease("mixed-below", 30*time.Second, "holder below-old", holderIs("below-old"))
		if s := ptr.Deref(lease.Spec.Strategy, ""); s != oev {
			t.Errorf("strategy %q, want the newest binaries' %q", s, oev)
		}
		x.expectEvent(t, x.e, "mixed-below", controller.ReasonLeaderElected, "Elected below-old under OldestEmulationVersion")
	})
}

// A candidate the API accepts that its strategy cannot rank: under Priority
// an empty emulationVersion (the API requires one only under
// OldestEmulationVersion) and a priority that is not a number.
func (x *malformed) invalidUnderStrategy(t *testing.T) {
	noEmulation := newCandidate("no-emulation", "invalid", "1.36.0", "", strategy.PriorityName)
	x.create(t, x.e, noEmulation)
	badPriority := newCandidate("bad-priority", "invalid", "1.36.0", "1.36.0", strategy.PriorityName)
	badPriority.Annotations = map[string]string{strategy.PriorityAnnotation: "high"}
	x.create(t, x.e, badPriority)
	x.expectEvent(t, x.e, "invalid", controller.ReasonInvalidCandidate, "Candidate no-emulation cannot take part")
	x.expectEvent(t, x.e, "invalid", controller.ReasonInvalidCandidate, "Candidate bad-priority cannot take part")
	// Naming one or both candidates, as the controller first saw them: the
	// recorder folds the next such Event on the unchanged Lease into it.
	x.expectEvent(t, x.e, "invalid", controller.ReasonNoEligible, "no-emulation(binary 1.36.0, emulation )")
	x.expectNoLease(t, x.e, "invalid")
}

// Candidates name a Lease by name only: those in another namespace belong to
// the Lease of that name there. The Lease here is left alone; one is elected
// there.
func (x *malformed) otherNamespace(t *testing.T) {
	before := x.createLease(t, x.e, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](15)},
	})
	x.create(t, x.other, newCandidate("far", "shared", "1.36.0", "1.34.0", oev))
	x.create(t, x.other, newCandidate("farther", "shared", "1.36.0", "1.36.0", oev))
	x.at(t, x.other).waitLease("shared", 30*time.Second, "holder far in "+x.other.ns, holderIs("far"))
	x.expectEvent(t, x.other, "shared", controller.ReasonLeaderElected, "Elected far")
	x.expectUnchanged(t, x.e, before)
	x.expectNoEvents(t, x.e, "shared")
}

// Candidates equal on merit, created in the same second: the name decides,
// the same way on every election. The Lease is held by a component outside
// coordinated election until every candidate is there, then released.
func (x *malformed) ties(t *testing.T) {
	ctx := context.Background()
	x.createLease(t, x.e, heldLease("tie", "placeholder", ptr.To[int32](3600)))
	names := []string{"tie-c", "tie-a", "tie-b"}
	var created []*coordinationv1beta1.LeaseCandidate
	for attempt := 1; ; attempt++ {
		created = created[:0]
		for _, name := range names {
			created = append(created, x.create(t, x.e, newCandidate(name, "tie", "1.36.0", "1.36.0", oev)))
		}
		if sameSecond(created) {
			break
		}
		if attempt == 5 {
			t.Fatalf("could not create the candidates within one second in %d attempts", attempt)
		}
		for _, lc := range created {
			x.delete(t, x.e, lc)
		}
	}
	best, _ := strategy.Best(strategy.OldestEmulationVersion{}, created)
	if best == nil || best.Name != "tie-a" {
		t.Fatalf("pkg/strategy ranks %v first, want tie-a", best)
	}
	x.waitCandidatesSeen(t)
	lease := x.release(t, x.e, "tie")
	got := x.at(t, x.e).waitLease("tie", 30*time.Second, "holder tie-a", holderIs("tie-a"))
	term := ptr.Deref(got.Spec.LeaseTransitions, 0)
	if term <= ptr.Deref(lease.Spec.LeaseTransitions, 0) {
		t.Errorf("leaseTransitions %d, want above the placeholder's %d", term, ptr.Deref(lease.Spec.LeaseTransitions, 0))
	}
	x.expectEvent(t, x.e, "tie", controller.ReasonLeaderElected, "Elected tie-a")

	// Again: the Lease deleted, the same winner in a later term.
	if err := x.e.acc.Leases(x.e.ns).Delete(ctx, "tie", nil); err != nil {
		t.Fatal(err)
	}
	again := x.at(t, x.e).waitLease("tie", 30*time.Second, "re-created", func(l *coordinationv1.Lease) bool { return l.UID != got.UID })
	if !holderIs("tie-a")(again) || ptr.Deref(again.Spec.LeaseTransitions, 0) <= term {
		t.Errorf("re-created: %s, want tie-a again in a term above %d", describe(again), term)
	}
}

// 1,000 candidates on one Lease, of five emulation versions and created over
// several seconds: the winner is the one pkg/strategy ranks first, and the
// LeaderElected Event fits in what the API accepts.
func (x *malformed) crowd(t *testing.T) {
	const n = 1000
	x.createLease(t, x.e, heldLease("crowd", "placeholder", ptr.To[int32](3600)))
	cands := make([]*coordinationv1beta1.LeaseCandidate, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				emulation := fmt.Sprintf("1.%d.0", 31+(i*7)%5)
				cands[i] = x.create(t, x.e, newCandidate(fmt.Sprintf("c%04d", i), "crowd", "1.36.0", emulation, oev))
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	best, invalid := strategy.Best(strategy.OldestEmulationVersion{}, cands)
	if best == nil || len(invalid) > 0 {
		t.Fatalf("pkg/strategy: best %v, invalid %v", best, invalid)
	}
	x.waitCandidatesSeen(t)
	x.release(t, x.e, "crowd")
	x.at(t, x.e).waitLease("crowd", 60*time.Second, "holder "+best.Name, holderIs(best.Name))
	ev := x.expectEvent(t, x.e, "crowd", controller.ReasonLeaderElected, "Elected "+best.Name)
	if !strings.Contains(ev.Note, "more") {
		t.Errorf("LeaderElected note %q does not say that more candidates took part", ev.Note)
	}
}

// ---- helpers ----

// at is e for the (sub)test t: its failures end t, not the test that made e.
func (x *malformed) at(t *testing.T, e *env) *env {
	c := *e
	c.t = t
	return &c
}

func newCandidate(name, lease, binary, emulation string, s coordinationv1.CoordinatedLeaseStrategy) *coordinationv1beta1.LeaseCandidate {
	return &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName: lease, BinaryVersion: binary, EmulationVersion: emulation, Strategy: s,
			RenewTime: ptr.To(metav1.NewMicroTime(time.Now())),
		},
	}
}

// heldLease is a Lease held and just renewed by holder.
func heldLease(name, holder string, duration *int32) *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseDurationSeconds: duration,
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](3),
		},
	}
}

func sameSecond(cands []*coordinationv1beta1.LeaseCandidate) bool {
	for _, lc := range cands[1:] {
		if !lc.CreationTimestamp.Equal(&cands[0].CreationTimestamp) {
			return false
		}
	}
	return true
}

// create creates a candidate in e's namespace and counts it.
func (x *malformed) create(t *testing.T, e *env, lc *coordinationv1beta1.LeaseCandidate) *coordinationv1beta1.LeaseCandidate {
	t.Helper()
	out, err := e.acc.LeaseCandidates(e.ns).Create(context.Background(), lc)
	if err != nil {
		t.Errorf("create candidate %s of %s: %v", lc.Name, lc.Spec.LeaseName, err)
		return nil
	}
	x.mu.Lock()
	x.candidates++
	x.mu.Unlock()
	return out
}

func (x *malformed) delete(t *testing.T, e *env, lc *coordinationv1beta1.LeaseCandidate) {
	t.Helper()
	if err := e.acc.LeaseCandidates(e.ns).Delete(context.Background(), lc.Name, &metav1.Preconditions{UID: &lc.UID}); err != nil {
		t.Fatalf("delete candidate %s: %v", lc.Name, err)
	}
	x.mu.Lock()
	x.candidates--
	x.mu.Unlock()
}

func (x *malformed) createLease(t *testing.T, e *env, lease *coordinationv1.Lease) *coordinationv1.Lease {
	t.Helper()
	out, err := e.acc.Leases(e.ns).Create(context.Background(), lease)
	if err != nil {
		t.Fatalf("create Lease %s: %v", lease.Name, err)
	}
	return out
}

// release makes the Lease's holder let it go, as a component outside
// coordinated election does when it stops, and returns the Lease as it was.
func (x *malformed) release(t *testing.T, e *env, name string) *coordinationv1.Lease {
	t.Helper()
	lease, err := e.acc.Leases(e.ns).Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	released := lease.DeepCopy()
	released.Spec.HolderIdentity = nil
	if _, err := e.acc.Leases(e.ns).Update(context.Background(), released); err != nil {
		t.Fatalf("release Lease %s: %v", name, err)
	}
	return lease
}

// waitCandidatesSeen waits until the controller has a record of every
// candidate created so far (its cle_candidates gauge counts them), so that an
// election from now on counts them all.
func (x *malformed) waitCandidatesSeen(t *testing.T) {
	t.Helper()
	x.mu.Lock()
	want := float64(x.candidates)
	x.mu.Unlock()
	var got float64
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		got = promtest.Value(x.r.scrape(t), "cle_candidates")
		return got == want, nil
	}); err != nil {
		t.Fatalf("cle_candidates = %v, want %v: %v", got, want, err)
	}
}

// expectEvent waits for an Event of reason on the Lease whose note contains
// note, and returns it. It also checks that no Event on the Lease has a note
// longer than the API accepts.
func (x *malformed) expectEvent(t *testing.T, e *env, lease, reason, note string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := leaseEvents(ctx, e, lease)
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, ev := range evs {
			seen = append(seen, ev.Reason+": "+ev.Note)
			if ev.Reason == reason && strings.Contains(ev.Note, note) {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s Event on Lease %s/%s saying %q (Events: %q): %v", reason, e.ns, lease, note, seen, err)
	}
	return found
}

func (x *malformed) expectNoEvents(t *testing.T, e *env, lease string) {
	t.Helper()
	evs, err := leaseEvents(context.Background(), e, lease)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		t.Errorf("Event on Lease %s/%s: %s %s", e.ns, lease, ev.Reason, ev.Note)
	}
}

func leaseEvents(ctx context.Context, e *env, lease string) ([]eventsv1.Event, error) {
	list, err := e.client.EventsV1().Events(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Kind == "Lease" && ev.Regarding.Name == lease {
			out = append(out, ev)
		}
	}
	return out, nil
}

// expectUnchanged checks that nobody wrote the Lease since before.
func (x *malformed) expectUnchanged(t *testing.T, e *env, before *coordinationv1.Lease) {
	t.Helper()
	now, err := e.acc.Leases(e.ns).Get(context.Background(), before.Name)
	if err != nil {
		t.Fatal(err)
	}
	if now.ResourceVersion != before.ResourceVersion {
		t.Errorf("Lease %s/%s written: %s, was %s", e.ns, before.Name, describe(now), describe(before))
	}
}

func (x *malformed) expectNoLease(t *testing.T, e *env, name string) {
	t.Helper()
	lease, err := e.acc.Leases(e.ns).Get(context.Background(), name)
	if !apierrors.IsNotFound(err) {
		t.Errorf("Lease %s/%s: %s, %v; want none", e.ns, name, describe(lease), err)
	}
}

// expectHealthy checks that the controller process is still running and
// healthy, and that its log has no panic, no failed election step and no
// Event the server rejected.
func (x *malformed) expectHealthy(t *testing.T) {
	t.Helper()
	select {
	case <-x.r.child.Exited():
		t.Fatalf("the controller exited")
	default:
	}
	if code, _, err := httpGet("http://" + x.r.health + "/healthz"); err != nil || code != 200 {
		t.Errorf("/healthz: %d, %v", code, err)
	}
	logs := x.r.child.Logs()
	for _, bad := range []string{"panic", "Server rejected event", "Unable to write event", "Election step failed"} {
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, bad) {
				t.Errorf("controller log: %s", line)
			}
		}
	}
}

// waitLog waits for a line of the replica's log that matches every pattern.
func (r *replica) waitLog(t *testing.T, what string, patterns ...string) {
	t.Helper()
	res := make([]*regexp.Regexp, len(patterns))
	for i, p := range patterns {
		res[i] = regexp.MustCompile(p)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
	lines:
		for _, line := range strings.Split(r.child.Logs(), "\n") {
			for _, re := range res {
				if !re.MatchString(line) {
					continue lines
				}
			}
			return true, nil
		}
		return false, nil
	}); err != nil {
		t.Fatalf("%s: no line of %s's log matches %q: %v", what, r.id, patterns, err)
	}
}
