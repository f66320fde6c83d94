package candidate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/lead"
	"github.com/cle-dev/cle/pkg/access"
)

// valid is a Config New accepts.
func valid() Config {
	return Config{
		RestConfig: &rest.Config{Host: "https://example.invalid"},
		Namespace:  "ns", LeaseName: "lease", Identity: "me",
		BinaryVersion: "1.36.0",
		Callbacks:     Callbacks{OnStartedLeading: func(context.Context) {}},
	}
}

func TestNewValidates(t *testing.T) {
	c, err := New(valid())
	if err != nil {
		t.Fatalf("New(valid) = %v", err)
	}
	got := c.cfg
	if got.LeaseDuration != 15*time.Second || got.RenewDeadline != 10*time.Second || got.RetryPeriod != 2*time.Second ||
		got.CandidateRenewInterval != DefaultCandidateRenewInterval || got.EmulationVersion != "1.36.0" ||
		got.Strategy != coordinationv1.OldestEmulationVersion || got.APIMode != "auto" || got.Clock == nil {
		t.Errorf("defaults not applied: %+v", got)
	}

	for name, tc := range map[string]struct {
		tweak func(*Config)
		want  string
	}{
		"no client":         {func(c *Config) { c.RestConfig = nil }, "one of RestConfig or Clients"},
		"two clients":       {func(c *Config) { c.Clients = access.Clients{Kube: fakeKube()} }, "not both"},
		"bad mode":          {func(c *Config) { c.APIMode = "magic" }, "APIMode"},
		"no namespace":      {func(c *Config) { c.Namespace = "" }, "Namespace is required"},
		"bad lease name":    {func(c *Config) { c.LeaseName = "Not_Valid" }, "LeaseName"},
		"bad identity":      {func(c *Config) { c.Identity = "Not_Valid" }, "Identity"},
		"no binary version": {func(c *Config) { c.BinaryVersion = "" }, "BinaryVersion"},
		"dev":               {func(c *Config) { c.BinaryVersion = "dev" }, `BinaryVersion: "dev" is not a semantic version such as 1.36.0 or v1.36.0`},
		"no patch":          {func(c *Config) { c.BinaryVersion = "v1.36" }, "BinaryVersion"},
		"git describe":      {func(c *Config) { c.EmulationVersion = "v1.35.0-12-gabcdef" }, ""},
		"v alone":           {func(c *Config) { c.BinaryVersion = "v" }, "BinaryVersion"},
		"emulation newer":   {func(c *Config) { c.EmulationVersion = "1.37.0" }, "newer than BinaryVersion"},
		"bad strategy":      {func(c *Config) { c.Strategy = "Youngest" }, "Strategy"},
		"fractional lease": {func(c *Config) {
			c.LeaseDuration = 1500 * time.Millisecond
			c.RenewDeadline = time.Second
			c.RetryPeriod = 100 * time.Millisecond
		}, "whole number"},
		"deadline too long": {func(c *Config) { c.RenewDeadline = 15 * time.Second }, "RenewDeadline (15s) must be shorter"},
		"retry too long":    {func(c *Config) { c.RetryPeriod = 10 * time.Second }, "RetryPeriod (10s) must be shorter"},
		"negative":          {func(c *Config) { c.CandidateRenewInterval = -time.Second }, "must be positive"},
		"candidate renewed too rarely": {func(c *Config) { c.CandidateRenewInterval = 11 * time.Minute },
			"CandidateRenewInterval (11m0s) must be at most 10m0s"},
		"no OnStartedLeading":    {func(c *Config) { c.Callbacks.OnStartedLeading = nil }, "OnStartedLeading is required"},
		"access needs no client": {func(c *Config) { c.RestConfig = nil; c.access = access.NewNative(fakeKube()); c.APIMode = "magic" }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := valid()
			tc.tweak(&cfg)
			_, err := New(cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New = %v, want success", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want ErrInvalidConfig mentioning %q", err, tc.want)
			}
		})
	}
}

// TestVPrefixedVersions: a kubebuilder project's "v0.3.1" is accepted, and
// the LeaseCandidate carries it as the API requires, without the "v".
func TestVPrefixedVersions(t *testing.T) {
	cfg := valid()
	cfg.BinaryVersion, cfg.EmulationVersion = "v1.36.1", ""
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	if c.cfg.BinaryVersion != "1.36.1" || c.cfg.EmulationVersion != "1.36.1" {
		t.Errorf("versions %q, %q; want 1.36.1 for both", c.cfg.BinaryVersion, c.cfg.EmulationVersion)
	}
}

// Two components on one host in one namespace (host-network static Pods in
// kube-system, the KEP's own case) each get a LeaseCandidate of their own
// when they leave Identity to its default: the host name and the Lease's.
func TestDefaultIdentityIsPerLease(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		host, err := os.Hostname()
		if err != nil {
			t.Skipf("no host name: %v", err)
		}
		a := h.start(func(c *Config) { c.Identity = "" })
		b, _ := h.startAnother(func(c *Config) { c.Identity = ""; c.LeaseName = "other" })
		if a.Identity() == b.Identity() || a.Identity() != NameFor(host+"-"+testLease) || b.Identity() != NameFor(host+"-other") {
			t.Fatalf("identities %q and %q, want the host name with each Lease's name", a.Identity(), b.Identity())
		}
		for _, c := range []*Candidate{a, b} {
			if lc := h.candidate(c.Identity()); lc == nil || lc.Spec.LeaseName != c.cfg.LeaseName {
				t.Errorf("LeaseCandidate %s = %v, want the candidate of Lease %s", c.Identity(), lc, c.cfg.LeaseName)
			}
		}
	})
}

// An Identity that names another Lease's LeaseCandidate is not taken: the
// object is left as it is (a real API server refuses a new leaseName anyway,
// forever), and Run says why.
func TestIdentityOfAnotherLeaseIsNotTaken(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.put(&coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: me},
			Spec: coordinationv1beta1.LeaseCandidateSpec{
				LeaseName: "other", BinaryVersion: "1.35.0", EmulationVersion: "1.35.0", Strategy: coordinationv1.OldestEmulationVersion,
				RenewTime: ptr.To(metav1.NewMicroTime(t0)),
			},
		})
		before := h.candidate(me)
		c, err := New(h.config())
		if err != nil {
			t.Fatal(err)
		}
		h.run(c)
		stop := h.cancel
		h.cancel = nil // Run has returned, or the test fails now
		defer stop()
		select {
		case err := <-h.done:
			if !errors.Is(err, ErrIdentityInUse) || !strings.Contains(err.Error(), `Lease "other"`) {
				t.Errorf("Run = %v, want ErrIdentityInUse naming Lease other", err)
			}
		default:
			t.Fatal("Run goes on with another Lease's LeaseCandidate")
		}
		if after := h.candidate(me); after.ResourceVersion != before.ResourceVersion {
			t.Errorf("the other Lease's LeaseCandidate was rewritten: %+v", after.Spec)
		}
	})
}

func TestRegistersCandidate(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.start(func(c *Config) { c.Strategy = "cle.dev/Priority" })
		lc := h.candidate(me)
		if lc == nil {
			t.Fatal("no LeaseCandidate created")
		}
		want := coordinationv1beta1.LeaseCandidateSpec{
			LeaseName: testLease, BinaryVersion: "1.36.0", EmulationVersion: "1.35.0", Strategy: "cle.dev/Priority",
			RenewTime: ptr.To(metav1.NewMicroTime(t0)),
		}
		if !lc.Spec.RenewTime.Equal(want.RenewTime) || lc.Spec.LeaseName != want.LeaseName || lc.Spec.BinaryVersion != want.BinaryVersion ||
			lc.Spec.EmulationVersion != want.EmulationVersion || lc.Spec.Strategy != want.Strategy {
			t.Errorf("LeaseCandidate spec = %+v, want %+v", lc.Spec, want)
		}
		if h.lease() != nil {
			t.Error("the candidate created a Lease by itself")
		}
	})
}

func TestRestartRefreshesCandidate(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.put(&coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: me},
			Spec: coordinationv1beta1.LeaseCandidateSpec{
				LeaseName: testLease, BinaryVersion: "1.35.0", EmulationVersion: "1.34.0", Strategy: coordinationv1.OldestEmulationVersion,
				RenewTime: ptr.To(metav1.NewMicroTime(t0.Add(-time.Hour))),
			},
		})
		before := h.candidate(me)
		h.start()
		after := h.candidate(me)
		if after.UID != before.UID {
			t.Errorf("LeaseCandidate re-created (UID %s -> %s), want updated in place", before.UID, after.UID)
		}
		if after.Spec.BinaryVersion != "1.36.0" || after.Spec.EmulationVersion != "1.35.0" || !after.Spec.RenewTime.Time.Equal(t0) {
			t.Errorf("LeaseCandidate not refreshed: %+v", after.Spec)
		}
	})
}

// TestCandidateWritesAreRareByDefault: in steady state, with a leader
// renewing the Lease, a candidate writes its LeaseCandidate as rarely as
// client-go's candidates do (every 5 minutes); liveness at election time
// comes from pings, which it answers at once.
func TestCandidateWritesAreRareByDefault(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		h.elect(me)
		writes := h.countActions("update", candidatesGVR)
		for elapsed := time.Duration(0); elapsed < 10*time.Minute; elapsed += DefaultRetryPeriod {
			h.step(DefaultRetryPeriod)
		}
		if !c.IsLeader() {
			t.Fatal("not leading")
		}
		if n := h.countActions("update", candidatesGVR) - writes; n > 2 {
			t.Errorf("%d writes of the LeaseCandidate in 10 minutes of steady state, want at most 2 (one every 5 minutes)", n)
		}
	})
}

func TestRenewsCandidatePeriodically(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.start()
		writes := h.countActions("update", candidatesGVR)
		h.step(DefaultCandidateRenewInterval - time.Second)
		if n := h.countActions("update", candidatesGVR); n != writes {
			t.Errorf("candidate written %d times before its renew interval", n-writes)
		}
		h.step(time.Second)
		lc := h.candidate(me)
		if want := t0.Add(DefaultCandidateRenewInterval); !lc.Spec.RenewTime.Time.Equal(want) {
			t.Errorf("renewTime = %v, want %v", lc.Spec.RenewTime, want)
		}
	})
}

func TestAnswersPings(t *testing.T) {
	for name, offset := range map[string]time.Duration{
		"ping from a clock behind ours":   -3 * time.Second,
		"ping from a clock ahead of ours": 7 * time.Second,
	} {
		t.Run(name, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				h.start()
				h.step(5 * time.Second)
				lc := h.candidate(me).DeepCopy()
				ping := metav1.NewMicroTime(h.clock.Now().Add(offset))
				lc.Spec.PingTime = &ping
				h.put(lc) // no clock step: the answer must not wait for a timer
				got := h.candidate(me).Spec.RenewTime
				want := h.clock.Now()
				if ping.After(want) {
					want = ping.Time
				}
				if got == nil || !got.Time.Equal(want) {
					t.Errorf("renewTime after ping at %v = %v, want %v", ping, got, want)
				}
			})
		})
	}
}

func TestRecreatesDeletedCandidate(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.start()
		first := h.candidate(me)
		h.remove(candidatesGVR, me)
		again := h.candidate(me)
		if again == nil || again.UID == first.UID {
			t.Fatalf("LeaseCandidate not re-created after deletion: %v", again)
		}
	})
}

// TestRecreatesACandidateDeletedUnseen: a LeaseCandidate created while the
// watch was down and deleted before the informer relisted leaves no event
// behind (the relist finds nothing, as the store had nothing); the
// registrar, whose informer never showed its creation, looks again within
// the renew deadline and creates it anew, instead of at the next renewal
// minutes later, while the controller leaves its Lease to a holder it sees
// as no candidate (the simulation's seed 8966 with candidates' relists).
func TestRecreatesACandidateDeletedUnseen(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.candidateGoneUnseen.Store(true)
		h.start()
		if h.candidate(me) != nil {
			t.Fatal("the harness stored the first LeaseCandidate")
		}
		h.step(DefaultRenewDeadline)
		if h.candidate(me) == nil {
			t.Fatalf("LeaseCandidate not created again within the renew deadline (%s)", DefaultRenewDeadline)
		}
	})
}

func TestLeadsOnlyAfterRenewingALeaseNamingIt(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		h.elect("other")
		if c.IsLeader() || c.Leader() != "other" {
			t.Fatalf("IsLeader=%v Leader=%q with the Lease held by other", c.IsLeader(), c.Leader())
		}
		if n := h.countActions("update", leasesGVR); n != 0 {
			t.Errorf("wrote a Lease held by another %d times", n)
		}

		h.failLeaseUpdates.Store(true)
		h.elect(me)
		if c.IsLeader() || slices.Contains(h.entries(), "started leading") {
			t.Fatal("leader without a successful renewal")
		}
		h.failLeaseUpdates.Store(false)
		h.step(DefaultRetryPeriod)
		if !c.IsLeader() || !slices.Contains(h.entries(), "started leading") {
			t.Fatalf("not leading after a successful renewal: %v", h.entries())
		}
		lease := h.lease()
		if token, ok := c.Token(); !ok || token != ptr.Deref(lease.Spec.LeaseTransitions, -1) {
			t.Errorf("Token() = %d, %v; want %d", token, ok, ptr.Deref(lease.Spec.LeaseTransitions, -1))
		}
		if ptr.Deref(lease.Spec.LeaseDurationSeconds, 0) != 15 || !lease.Spec.RenewTime.Time.Equal(h.clock.Now()) {
			t.Errorf("renewal wrote %+v, want leaseDurationSeconds 15 and renewTime now", lease.Spec)
		}
	})
}

func TestRenewsEveryRetryPeriodWithoutReads(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		h.elect(me)
		if !c.IsLeader() {
			t.Fatal("not leader")
		}
		updates, gets := h.countActions("update", leasesGVR), h.countActions("get", leasesGVR)
		for range 10 {
			h.step(DefaultRetryPeriod)
		}
		if n := h.countActions("update", leasesGVR) - updates; n != 10 {
			t.Errorf("%d renewals in 10 retry periods, want 10", n)
		}
		if n := h.countActions("get", leasesGVR) - gets; n != 0 {
			t.Errorf("%d GETs of the Lease while renewing, want 0", n)
		}
		if !h.lease().Spec.RenewTime.Time.Equal(h.clock.Now()) || !c.IsLeader() {
			t.Errorf("renewTime %v, want %v", h.lease().Spec.RenewTime, h.clock.Now())
		}
	})
}

func TestHandsOverToPreferredHolder(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		h.elect(me)
		before := h.lease()
		h.prefer("better")
		lease := h.lease()
		if holder(lease) != "better" || lease.Spec.PreferredHolder != nil ||
			ptr.Deref(lease.Spec.LeaseTransitions, 0) != ptr.Deref(before.Spec.LeaseTransitions, 0)+1 {
			t.Fatalf("after preferredHolder: holder=%s preferred=%v transitions=%d; want holder better, preferred cleared, transitions+1",
				holder(lease), lease.Spec.PreferredHolder, ptr.Deref(lease.Spec.LeaseTransitions, 0))
		}
		if c.IsLeader() {
			t.Error("still leader after handing over")
		}
		wantOrder(t, h.entries(), "leader work returned", "stopped leading", "update Lease lease")
	})
}

func TestStopsAtRenewDeadlineAndRejoins(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		h.elect(me)
		h.failLeaseUpdates.Store(true)
		for elapsed := DefaultRetryPeriod; elapsed < DefaultRenewDeadline; elapsed += DefaultRetryPeriod {
			h.step(DefaultRetryPeriod)
			if !c.IsLeader() {
				t.Fatalf("stopped leading %s after the last renewal, before the renew deadline", elapsed)
			}
		}
		// The last successful renewal was sent at t0: at t0 + renew deadline
		// it must have stopped.
		h.step(t0.Add(DefaultRenewDeadline).Sub(h.clock.Now()))
		if c.IsLeader() || !slices.Contains(h.entries(), "leader work returned") {
			t.Fatalf("still leading at the renew deadline: %v", h.entries())
		}
		select {
		case err := <-h.done:
			t.Fatalf("Run returned after losing leadership (%v); it must go back to candidacy", err)
		default:
		}
		h.failLeaseUpdates.Store(false)
		h.step(DefaultRetryPeriod)
		if !c.IsLeader() {
			t.Fatal("did not rejoin as leader once renewals worked again")
		}
	})
}

// TestPauseLongerThanRenewDeadline: after a pause longer than the renew
// deadline, the library is not leader at the first look, stops its leader
// work before it does anything else, and what it leads next is a new term
// with a new token, not the old one.
//
// The library's loop runs as soon as the clock steps, concurrently with the
// test, and since the Lease still names this process it may lead again at
// once, in a new term. So the checks of the old term are made while no new
// term can start: a term starts only after the last one's leader work has
// returned, and the leader work here returns only when the test lets it.
// What came next is read from what the library recorded, in order.
func TestPauseLongerThanRenewDeadline(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		started := make(chan int32, 8)  // each term's token, as its leader work got it
		stopping := make(chan int32, 8) // each term whose leader work was told to stop
		hold := make(chan struct{})
		letGo := sync.OnceFunc(func() { close(hold) })
		defer letGo() // Run, stopped at the end, waits for leader work
		c := h.start(func(cfg *Config) {
			cfg.Callbacks.OnStartedLeading = func(ctx context.Context) {
				token, _ := TokenFrom(ctx)
				h.log("started leading term %d", token)
				started <- token
				<-ctx.Done()
				stopping <- token
				<-hold
				h.log("leader work of term %d returned", token)
			}
		})
		h.elect(me)
		var old int32
		select {
		case old = <-started:
		default:
			t.Fatalf("not leading once elected: %v", h.entries())
		}
		inner := &recorder{}
		rt := guardedTransport(t, c, "https://example.invalid", inner)
		post := func() error {
			req, _ := http.NewRequest(http.MethodPost, "https://example.invalid/api/v1/namespaces/ns/configmaps", strings.NewReader("{}"))
			_, err := rt.RoundTrip(req)
			return err
		}
		if err := post(); err != nil || inner.n != 1 {
			t.Fatalf("guarded write while leader: err=%v, sent=%d", err, inner.n)
		}
		before := len(h.entries())
		leaseWrites := h.countActions("update", leasesGVR)

		// A pause: the clock jumps past the deadline in one go. Whether the
		// library's loop or this first look finds it first, nothing acts as
		// leader any more, and nothing can start a new term while the old
		// term's leader work has not returned.
		h.clock.Step(DefaultRenewDeadline + time.Second)
		if c.IsLeader() {
			t.Error("IsLeader after a pause longer than the renew deadline")
		}
		if token, ok := c.Token(); ok {
			t.Errorf("Token() = %d after a pause longer than the renew deadline, want none (the term was %d)", token, old)
		}
		if err := post(); !errors.Is(err, ErrNotLeader) || inner.n != 1 {
			t.Errorf("guarded write after the pause: err=%v, sent=%d; want ErrNotLeader and nothing sent", err, inner.n)
		}
		synctest.Wait()
		select {
		case token := <-stopping:
			if token != old {
				t.Errorf("leader work of term %d told to stop, want term %d", token, old)
			}
		default:
			t.Errorf("leader work not told to stop after the pause: %v", h.entries())
		}
		if c.IsLeader() {
			t.Error("IsLeader while the old term's leader work stops")
		}
		if n := h.countActions("update", leasesGVR) - leaseWrites; n != 0 {
			t.Errorf("%d Lease writes after the pause before leader work returned, want none", n)
		}

		// Once leader work has returned the library may lead again, but only
		// in a new term.
		letGo()
		h.step(DefaultRetryPeriod)
		after := h.entries()[before:]
		stopped := []string{fmt.Sprintf("leader work of term %d returned", old), "stopped leading"}
		if len(after) < len(stopped) || !slices.Equal(after[:len(stopped)], stopped) {
			t.Errorf("after the pause: %q, want %q before anything else", after, stopped)
		}
		var next int32
		select {
		case next = <-started:
		default:
			t.Fatalf("not leading again once the Lease could be renewed: %q", after)
		}
		if next <= old {
			t.Errorf("next term's token %d, want above the old term's %d", next, old)
		}
		if token, ok := c.Token(); !ok || token != next || token != ptr.Deref(h.lease().Spec.LeaseTransitions, -1) {
			t.Errorf("Token() = %d, %v; want %d, the new term's (leaseTransitions %d)", token, ok, next, ptr.Deref(h.lease().Spec.LeaseTransitions, -1))
		}
	})
}

func TestShutdownStopsWorkDeletesCandidateThenReleases(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		h.elect(me)
		before := h.lease()
		h.stop()
		if c.IsLeader() {
			t.Error("leader after Run returned")
		}
		wantOrder(t, h.entries(), "leader work returned", "stopped leading", "delete LeaseCandidate me", "update Lease lease")
		lease := h.lease()
		// A release counts no term: the controller counts the next when it
		// names a holder.
		if holder(lease) != "" || ptr.Deref(lease.Spec.LeaseTransitions, 0) != ptr.Deref(before.Spec.LeaseTransitions, 0) {
			t.Errorf("after shutdown: holder=%s transitions=%d, want released at the term's %d", holder(lease),
				ptr.Deref(lease.Spec.LeaseTransitions, 0), ptr.Deref(before.Spec.LeaseTransitions, 0))
		}
		if h.candidate(me) != nil {
			t.Error("LeaseCandidate left behind")
		}
	})
}

func TestShutdownHandsOverWhenPreferred(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.start(func(c *Config) { c.DeleteCandidateOnExit = ptr.To(false) })
		h.elect(me)
		// The handover write fails while running, so the Lease still names
		// this process with a preferred holder when it shuts down.
		h.failLeaseUpdates.Store(true)
		h.prefer("better")
		h.failLeaseUpdates.Store(false)
		h.stop()
		if lease := h.lease(); holder(lease) != "better" {
			t.Errorf("after shutdown the Lease names %s, want the preferred holder", holder(lease))
		}
		if h.candidate(me) == nil {
			t.Error("LeaseCandidate deleted although DeleteCandidateOnExit is false")
		}
	})
}

func TestShutdownKeepsLeaseWhenAsked(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.start(func(c *Config) { c.ReleaseOnCancel = ptr.To(false) })
		h.elect(me)
		h.stop()
		if lease := h.lease(); holder(lease) != me {
			t.Errorf("Lease released (holder %s) although ReleaseOnCancel is false", holder(lease))
		}
	})
}

func TestLeaseDeletedOrTakenUnderLeader(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		h.elect(me)
		h.remove(leasesGVR, testLease)
		if c.IsLeader() || !slices.Contains(h.entries(), "leader work returned") {
			t.Fatal("still leading a deleted Lease")
		}
		h.elect(me) // a controller re-creates it
		if !c.IsLeader() {
			t.Fatal("not leading the re-created Lease")
		}
		h.elect("other")
		if c.IsLeader() {
			t.Error("still leading after the Lease was given to another")
		}
	})
}

// A renewal answered NotFound means the Lease was deleted, whatever the
// watch has delivered so far: the controller may name another holder as soon
// as it sees the deletion, so the leader stops at once rather than at its
// renew deadline.
func TestRenewalOfADeletedLeaseStepsDown(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		h.elect(me)
		if !c.IsLeader() {
			t.Fatal("not leading the Lease that names it")
		}
		h.leaseGoneUnseen.Store(true)
		h.step(DefaultRetryPeriod) // the next renewal
		if c.IsLeader() || !slices.Contains(h.entries(), "leader work returned") {
			t.Fatalf("still leading %s after a renewal found the Lease gone: %v", DefaultRetryPeriod, h.entries())
		}
		select {
		case err := <-h.done:
			t.Fatalf("Run returned (%v); it must go back to candidacy", err)
		default:
		}
		h.leaseGoneUnseen.Store(false)
		h.remove(leasesGVR, testLease)
		h.elect(me) // a controller creates it again
		if !c.IsLeader() {
			t.Fatal("not leading the re-created Lease")
		}
	})
}

func TestOddObjects(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		// A Lease with nothing set but the holder.
		h.put(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(me)},
		})
		if !c.IsLeader() {
			t.Error("not leading a Lease that names it with no renewTime")
		}
		// A candidate pinged with no renewTime at all.
		lc := h.candidate(me).DeepCopy()
		lc.Spec.RenewTime = nil
		lc.Spec.PingTime = ptr.To(metav1.NewMicroTime(h.clock.Now()))
		h.put(lc)
		if rt := h.candidate(me).Spec.RenewTime; rt == nil {
			t.Error("ping of a candidate with no renewTime not answered")
		}
		// A Lease with no holder at all.
		lease := h.lease().DeepCopy()
		lease.Spec = coordinationv1.LeaseSpec{}
		h.put(lease)
		if c.IsLeader() || c.Leader() != "" {
			t.Errorf("IsLeader=%v Leader=%q for a Lease with no holder", c.IsLeader(), c.Leader())
		}
	})
}

func TestOnNewLeader(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.start(func(c *Config) {
			c.Callbacks.OnNewLeader = func(id string) { h.log("new leader %s", id) }
		})
		h.elect("a")
		h.elect("b")
		h.elect("b")
		synctest.Wait()
		var got []string
		for _, e := range h.entries() {
			if strings.HasPrefix(e, "new leader") {
				got = append(got, e)
			}
		}
		slices.Sort(got)
		if want := []string{"new leader a", "new leader b"}; !slices.Equal(got, want) {
			t.Errorf("OnNewLeader calls = %v, want %v", got, want)
		}
	})
}

func TestRunTwice(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		if err := c.Run(context.Background()); !errors.Is(err, ErrAlreadyRunning) {
			t.Errorf("second Run = %v, want ErrAlreadyRunning", err)
		}
	})
}

// wantOrder checks that want appear in entries in this order.
func wantOrder(t *testing.T, entries []string, want ...string) {
	t.Helper()
	i := 0
	for _, e := range entries {
		if i < len(want) && e == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("want %q in this order, got %q", want, entries)
	}
}

// guardedTransport is the transport of a client built from c.WrapConfig,
// for host, whose requests that pass the guard reach inner.
func guardedTransport(t testing.TB, c *Candidate, host string, inner http.RoundTripper) http.RoundTripper {
	t.Helper()
	rt, err := rest.TransportFor(c.WrapConfig(&rest.Config{Host: host, Transport: inner}))
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

type recorder struct{ n int }

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.n++
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

func TestRenewConflictIsResolvedByOneRead(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		h.elect(me)
		gets := h.countActions("get", leasesGVR)
		h.conflictOnce.Store(true)
		h.step(DefaultRetryPeriod)
		if n := h.countActions("get", leasesGVR) - gets; n != 1 {
			t.Errorf("%d GETs after a conflict, want 1", n)
		}
		if !h.lease().Spec.RenewTime.Time.Equal(h.clock.Now()) || !c.IsLeader() {
			t.Errorf("renewal not retried after the conflict: renewTime %v, leader %v", h.lease().Spec.RenewTime, c.IsLeader())
		}
	})
}

func TestWrapConfigPassesReadsRefusesWrites(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		inner := &recorder{}
		rt := guardedTransport(t, c, "https://example.invalid", inner)
		for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodOptions} {
			req, _ := http.NewRequest(method, "https://example.invalid/api/v1/namespaces/ns/configmaps?watch=true", nil)
			if _, err := rt.RoundTrip(req); err != nil {
				t.Errorf("%s while not leader: %v", method, err)
			}
		}
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			req, _ := http.NewRequest(method, "https://example.invalid/api/v1/namespaces/ns/configmaps/x", nil)
			if _, err := rt.RoundTrip(req); !errors.Is(err, ErrNotLeader) {
				t.Errorf("%s while not leader = %v, want ErrNotLeader", method, err)
			}
		}
		if inner.n != 3 {
			t.Errorf("%d requests reached the server, want the 3 reads", inner.n)
		}
	})
}

// healthChecker is k8s.io/apiserver/pkg/server/healthz.HealthChecker,
// restated so the module does not depend on k8s.io/apiserver.
type healthChecker interface {
	Name() string
	Check(req *http.Request) error
}

var _ healthChecker = (*HealthCheck)(nil)

func TestHealthCheck(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		release := make(chan struct{})
		c := h.start(func(c *Config) {
			c.Callbacks.OnStartedLeading = func(context.Context) { <-release } // ignores its context
		})
		var check healthChecker = c.HealthCheck(20 * time.Second)
		if check.Name() != "leader-election" {
			t.Errorf("Name() = %q", check.Name())
		}
		h.elect(me)
		h.step(DefaultRetryPeriod)
		if err := check.Check(nil); err != nil {
			t.Errorf("healthy leader: %v", err)
		}
		h.prefer("better") // leadership ends; the work does not return
		h.step(10 * time.Second)
		if err := check.Check(nil); err != nil {
			t.Errorf("unhealthy within the tolerance: %v", err)
		}
		h.step(11 * time.Second)
		if err := check.Check(nil); err == nil {
			t.Error("healthy although leader work has not returned 21s after it was told to stop")
		}
		if holder(h.lease()) != me {
			t.Error("Lease handed over before leader work returned")
		}
		close(release)
		synctest.Wait()
		if err := check.Check(nil); err != nil {
			t.Errorf("after the work returned: %v", err)
		}
		if holder(h.lease()) != "better" {
			t.Error("Lease not handed over after leader work returned")
		}
	})
}

// TestTermsExhausted: a Lease whose leaseTransitions is the largest there is
// cannot give a new term a fencing token of its own, so the candidate named
// in it does not lead: the token would wrap around to below every earlier
// one.
func TestTermsExhausted(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		h.put(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testLease},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(me), LeaseTransitions: ptr.To[int32](math.MaxInt32),
				Strategy: ptr.To(coordinationv1.OldestEmulationVersion), LeaseDurationSeconds: ptr.To[int32](5),
			},
		})
		h.step(3 * DefaultRetryPeriod)
		if c.IsLeader() || slices.Contains(h.entries(), "started leading") {
			t.Fatalf("leading a Lease at leaseTransitions %d: %v", int32(math.MaxInt32), h.entries())
		}
		if n := h.countActions("update", leasesGVR); n != 0 {
			t.Errorf("wrote the exhausted Lease %d times", n)
		}
		if got := ptr.Deref(h.lease().Spec.LeaseTransitions, 0); got != math.MaxInt32 {
			t.Errorf("leaseTransitions %d, want it left at %d", got, int32(math.MaxInt32))
		}
	})
}

// TestOneTermOneNumber: the count a controller's naming writes is the token
// the named process leads with, and the Lease keeps it for the whole term; a
// hand-over counts the next holder's term, so that holder leads with the
// count the hand-over wrote.
func TestOneTermOneNumber(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		h.elect("other")
		h.elect(me)
		named := ptr.Deref(h.lease().Spec.LeaseTransitions, 0)
		if token, ok := c.Token(); !ok || token != named {
			t.Fatalf("Token = %d, %v after a naming that counted term %d", token, ok, named)
		}
		for range 3 {
			h.step(DefaultRetryPeriod)
		}
		if got := ptr.Deref(h.lease().Spec.LeaseTransitions, 0); got != named {
			t.Errorf("leaseTransitions %d after renewals of term %d", got, named)
		}
		h.prefer("better")
		l := h.lease()
		if holder(l) != "better" || ptr.Deref(l.Spec.LeaseTransitions, 0) != named+1 || !lead.CountedNaming(l) {
			t.Errorf("after the hand-over: holder %s, leaseTransitions %d, acquireTime %v, renewTime %v; want better named for term %d",
				holder(l), ptr.Deref(l.Spec.LeaseTransitions, 0), l.Spec.AcquireTime, l.Spec.RenewTime, named+1)
		}
	})
}
