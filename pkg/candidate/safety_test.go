package candidate

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

// tokens records the token of every term as OnStartedLeading sees it.
type tokens struct {
	mu   sync.Mutex
	seen []int32
}

func (tk *tokens) record(c **Candidate) func(*Config) {
	return func(cfg *Config) {
		cfg.Callbacks.OnStartedLeading = func(ctx context.Context) {
			token, ok := (*c).Token()
			if !ok {
				token = -1
			}
			tk.mu.Lock()
			tk.seen = append(tk.seen, token)
			tk.mu.Unlock()
			<-ctx.Done()
		}
	}
}

func (tk *tokens) get() []int32 {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return append([]int32(nil), tk.seen...)
}

func wantIncreasing(t *testing.T, got []int32, terms int) {
	t.Helper()
	if len(got) != terms {
		t.Fatalf("%d terms started (tokens %v), want %d", len(got), got, terms)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Errorf("tokens of successive terms %v: want each larger than the one before", got)
		}
	}
}

// TestEachTermHasItsOwnToken: every term has its own token, even when the Lease
// keeps naming this process across a lapse, or when the controller does not
// increase leaseTransitions (kube-apiserver's built-in controller).
func TestEachTermHasItsOwnToken(t *testing.T) {
	t.Run("same holder after a lapse", func(t *testing.T) {
		bubble(t, func(t *testing.T, h *harness) {
			var c *Candidate
			tk := &tokens{}
			c = h.start(tk.record(&c))
			h.elect(me)
			h.failLeaseUpdates.Store(true)
			h.step(DefaultRenewDeadline)
			if c.IsLeader() {
				t.Fatal("still leader at the renew deadline")
			}
			h.failLeaseUpdates.Store(false)
			h.step(DefaultRetryPeriod)
			if !c.IsLeader() {
				t.Fatal("not leading again")
			}
			wantIncreasing(t, tk.get(), 2)
			if token, _ := c.Token(); token != ptr.Deref(h.lease().Spec.LeaseTransitions, -1) {
				t.Errorf("Token() = %d, Lease leaseTransitions = %d", token, ptr.Deref(h.lease().Spec.LeaseTransitions, -1))
			}
		})
	})
	t.Run("controller that does not count transitions", func(t *testing.T) {
		bubble(t, func(t *testing.T, h *harness) {
			var c *Candidate
			tk := &tokens{}
			c = h.start(tk.record(&c))
			h.name(me) // creates the Lease without leaseTransitions
			if !c.IsLeader() {
				t.Fatal("not leading")
			}
			h.step(DefaultRetryPeriod)
			h.name("other")
			h.step(DefaultRetryPeriod)
			h.name(me)
			if !c.IsLeader() {
				t.Fatal("not leading again")
			}
			wantIncreasing(t, tk.get(), 2)
			if tk.get()[0] < 1 {
				t.Errorf("first term's token %d: the first renewal must count the term", tk.get()[0])
			}
		})
	})
}

// TestTokenIncreasesAcrossLeaseRecreation: a Lease deleted and created
// again by a controller that starts leaseTransitions over (kube-apiserver's
// built-in controller) does not take this process's tokens back: its next
// term's token is above every leaseTransitions it observed for the Lease.
func TestTokenIncreasesAcrossLeaseRecreation(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		var c *Candidate
		tk := &tokens{}
		c = h.start(tk.record(&c))
		for range 3 {
			h.elect(me)
			h.step(DefaultRetryPeriod)
			h.elect("other")
			h.step(DefaultRetryPeriod)
		}
		observed := ptr.Deref(h.lease().Spec.LeaseTransitions, 0)
		h.remove(leasesGVR, testLease)
		h.name(me) // re-created with no leaseTransitions
		if !c.IsLeader() {
			t.Fatal("not leading the re-created Lease")
		}
		got := tk.get()
		wantIncreasing(t, got, 4)
		if last := got[len(got)-1]; last <= observed {
			t.Errorf("token %d on the re-created Lease, want above %d, the leaseTransitions observed before it was deleted", last, observed)
		}
		if token, _ := c.Token(); token != ptr.Deref(h.lease().Spec.LeaseTransitions, -1) {
			t.Errorf("Token() = %d, the Lease's leaseTransitions %d: the token must be what the Lease says", token, ptr.Deref(h.lease().Spec.LeaseTransitions, -1))
		}
	})
}

// TestTokenFromLeaderContext: TokenFrom gives leader work its own term's
// token, even once the term is over.
func TestTokenFromLeaderContext(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		got := make(chan context.Context, 1)
		c := h.start(func(cfg *Config) {
			cfg.Callbacks.OnStartedLeading = func(ctx context.Context) {
				got <- ctx
				<-ctx.Done()
			}
		})
		h.elect(me)
		ctx := <-got
		token, ok := TokenFrom(ctx)
		want, _ := c.Token()
		if !ok || token != want || token != ptr.Deref(h.lease().Spec.LeaseTransitions, -1) {
			t.Errorf("TokenFrom(leader ctx) = %d, %v; want %d (the Lease's leaseTransitions)", token, ok, want)
		}
		h.elect("other")
		if again, ok := TokenFrom(ctx); !ok || again != token {
			t.Errorf("TokenFrom after the term ended = %d, %v; want %d", again, ok, token)
		}
		if _, ok := TokenFrom(context.Background()); ok {
			t.Error("TokenFrom(Background) reports a token")
		}
	})
}

// TestPingAnsweredAtOnceAfterConflict: a ping is answered at once even right
// after a write of the LeaseCandidate conflicted.
func TestPingAnsweredAtOnceAfterConflict(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.start()
		h.candidateConflictOnce.Store(true)
		h.step(DefaultCandidateRenewInterval) // the periodic renewal conflicts
		if h.candidateConflictOnce.Load() {
			t.Fatal("no renewal happened")
		}
		lc := h.candidate(me).DeepCopy()
		ping := metav1.NewMicroTime(h.clock.Now())
		lc.Spec.PingTime = &ping
		h.put(lc) // no clock step
		if got := h.candidate(me).Spec.RenewTime; got == nil || got.Before(&ping) {
			t.Errorf("ping at %v not answered at once: renewTime %v", ping, got)
		}
	})
}

// TestDuplicateIdentityLeadsOnce: two processes started with the same Identity
// never lead at once; the second takes over only once the first has stopped
// renewing for a lease duration.
func TestDuplicateIdentityLeadsOnce(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		keep := func(c *Config) {
			c.ReleaseOnCancel = ptr.To(false)
			c.DeleteCandidateOnExit = ptr.To(false)
		}
		a := h.start(keep)
		b, stopB := h.startAnother(keep)
		h.step(time.Millisecond)
		h.elect(me)
		for range 20 {
			h.step(DefaultRetryPeriod / 4)
			if a.IsLeader() && b.IsLeader() {
				t.Fatalf("both processes of identity %s lead at %v", me, h.clock.Now())
			}
		}
		if !a.IsLeader() && !b.IsLeader() {
			t.Fatal("neither process leads")
		}
		if n := strings.Count(strings.Join(h.entries(), "\n"), "started leading"); n != 1 {
			t.Errorf("%d terms started, want 1: %v", n, h.entries())
		}
		// The leader stops without releasing; the other takes over once the
		// Lease has stayed unchanged for a lease duration.
		leader, other, stopLeader := a, b, h.stop
		if b.IsLeader() {
			leader, other, stopLeader = b, a, stopB
		}
		stopLeader()
		if leader.IsLeader() {
			t.Fatal("stopped process still leader")
		}
		h.step(DefaultLeaseDuration - DefaultRetryPeriod)
		if other.IsLeader() {
			t.Fatal("took over before the Lease stayed unchanged for a lease duration")
		}
		h.step(2 * DefaultRetryPeriod)
		if !other.IsLeader() {
			t.Error("did not take over the abandoned Lease after a lease duration")
		}
	})
}

// TestDuplicateIdentityLeavesTheLeadersLeaseAlone: a process that shares the
// leader's Identity but does not lead never writes the leader's Lease, with
// hand-over, release and candidate deletion at their defaults: on
// preferredHolder the Lease goes over only once the real leader's work has
// returned, and when the duplicate shuts down the leader keeps its Lease.
func TestDuplicateIdentityLeavesTheLeadersLeaseAlone(t *testing.T) {
	// Leader work that returns only once the test lets it, so that a Lease
	// handed over while it still runs shows.
	slowWork := func(release <-chan struct{}, h *harness) func(*Config) {
		return func(cfg *Config) {
			cfg.Callbacks.OnStartedLeading = func(ctx context.Context) {
				h.log("started leading")
				<-ctx.Done()
				<-release
				h.log("leader work returned")
			}
		}
	}
	// twoOfMe starts two processes with the same Identity, elects it, and
	// returns which one leads, and the functions that stop each.
	twoOfMe := func(t *testing.T, h *harness, tweak func(*Config)) (leader, other *Candidate, stopLeader, stopOther func()) {
		a := h.start(tweak)
		b, stopB := h.startAnother(tweak)
		h.step(time.Millisecond)
		h.elect(me)
		h.step(DefaultRetryPeriod)
		switch {
		case a.IsLeader() && !b.IsLeader():
			return a, b, h.stop, stopB
		case b.IsLeader() && !a.IsLeader():
			return b, a, stopB, h.stop
		}
		t.Fatalf("want exactly one leader; IsLeader: %v and %v", a.IsLeader(), b.IsLeader())
		return nil, nil, nil, nil
	}

	t.Run("preferred holder", func(t *testing.T) {
		bubble(t, func(t *testing.T, h *harness) {
			release := make(chan struct{})
			twoOfMe(t, h, slowWork(release, h))
			h.prefer("better")
			h.step(DefaultRetryPeriod)
			if got := holder(h.lease()); got != me {
				t.Errorf("the Lease names %q while the leader's work still runs; want it kept until that work returns", got)
			}
			close(release)
			synctest.Wait()
			if got := holder(h.lease()); got != "better" {
				t.Errorf("after the leader's work returned the Lease names %q, want the preferred holder", got)
			}
		})
	})
	t.Run("shutdown of the duplicate", func(t *testing.T) {
		bubble(t, func(t *testing.T, h *harness) {
			release := make(chan struct{})
			defer close(release)
			leader, _, _, stopOther := twoOfMe(t, h, slowWork(release, h))
			stopOther()
			if got := holder(h.lease()); got != me {
				t.Errorf("after the duplicate shut down the Lease names %q; want the leader to keep it", got)
			}
			h.step(DefaultRetryPeriod)
			if !leader.IsLeader() || slices.Contains(h.entries(), "leader work returned") {
				t.Errorf("the leader stopped when a duplicate of its identity shut down: IsLeader %v, %v", leader.IsLeader(), h.entries())
			}
			if h.candidate(me) == nil {
				t.Error("the leader did not register its LeaseCandidate again after the duplicate deleted it")
			}
		})
	})
}

// suspendClock is a fake clock whose monotonic reading (Since) does not see
// a system suspend, while its wall clock (Now) does.
type suspendClock struct {
	*testingclock.FakeClock
	suspended atomic.Int64
}

func (s *suspendClock) Now() time.Time {
	return s.FakeClock.Now().Add(time.Duration(s.suspended.Load()))
}

// Since is monotonic: it ignores the suspend (valid for instants taken
// before it).
func (s *suspendClock) Since(t time.Time) time.Duration { return s.FakeClock.Now().Sub(t) }

// TestSuspendEndsLeadership: a suspend longer than the renew deadline ends
// leadership at once, although the monotonic clock did not advance: the first
// check that finds the deadline passed on the wall clock (IsLeader, Token or
// the write guard) turns leadership false, and the leader context is
// cancelled and leader work stopped right then, not when the monotonic timer
// of the renewal loop fires.
func TestSuspendEndsLeadership(t *testing.T) {
	for name, check := range map[string]func(t *testing.T, c *Candidate){
		"IsLeader": func(t *testing.T, c *Candidate) {
			if c.IsLeader() {
				t.Error("IsLeader after a suspend longer than the renew deadline")
			}
		},
		"Token": func(t *testing.T, c *Candidate) {
			if _, ok := c.Token(); ok {
				t.Error("Token valid after a suspend longer than the renew deadline")
			}
		},
		"write guard": func(t *testing.T, c *Candidate) {
			rt := guardedTransport(t, c, "https://example.invalid", &recorder{})
			req, _ := http.NewRequest(http.MethodPost, "https://example.invalid/api/v1/namespaces/ns/configmaps", strings.NewReader("{}"))
			if _, err := rt.RoundTrip(req); !errors.Is(err, ErrNotLeader) {
				t.Errorf("guarded write after a suspend longer than the renew deadline = %v, want ErrNotLeader", err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				clk := &suspendClock{FakeClock: h.clock}
				c := h.start(func(cfg *Config) { cfg.Clock = clk })
				h.elect(me)
				if !c.IsLeader() {
					t.Fatal("not leader")
				}
				clk.suspended.Store(int64(DefaultRenewDeadline + time.Second))
				check(t, c)
				synctest.Wait() // the monotonic clock does not move
				if !slices.Contains(h.entries(), "leader work returned") {
					t.Errorf("leader work still runs after leadership ended on the wall clock: %v", h.entries())
				}
				if c.IsLeader() {
					t.Error("IsLeader after a suspend longer than the renew deadline")
				}
			})
		})
	}
}

// TestWaitsAreMonotonic: a wait is measured on the monotonic clock alone. A
// Lease renewed under this identity by another process is taken only after
// it has stayed unchanged for a lease duration of this process's running
// time: a suspend, which the rest of the world does not share, does not
// count towards it.
func TestWaitsAreMonotonic(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		clk := &suspendClock{FakeClock: h.clock}
		// The Lease names this identity, renewed by another process.
		acquired := metav1.NewMicroTime(t0.Add(-time.Minute))
		renewed := metav1.NewMicroTime(t0.Add(-time.Second))
		h.put(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testLease},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(me), LeaseDurationSeconds: ptr.To[int32](15), LeaseTransitions: ptr.To[int32](3),
				AcquireTime: &acquired, RenewTime: &renewed,
			},
		})
		c := h.start(func(cfg *Config) { cfg.Clock = clk })
		h.step(DefaultRetryPeriod)
		if c.IsLeader() {
			t.Fatal("took a Lease another process renewed at once")
		}
		clk.suspended.Store(int64(DefaultLeaseDuration))
		h.step(DefaultRetryPeriod)
		// A change that leaves renewTime and leaseTransitions alone wakes
		// the elector without restarting the wait.
		touched := h.lease().DeepCopy()
		touched.Annotations = map[string]string{"touched": "true"}
		h.put(touched)
		if c.IsLeader() {
			t.Fatalf("took the Lease %s after first seeing it, a suspend included: the wait counted the suspend", 2*DefaultRetryPeriod)
		}
		h.step(DefaultLeaseDuration)
		if !c.IsLeader() {
			t.Error("did not take the Lease once it stayed unchanged for a lease duration")
		}
	})
}

// blocker is a RoundTripper whose requests hang until their context is done
// or until it is closed.
type blocker struct {
	release   chan struct{}
	cancelled atomic.Int32
	started   atomic.Int32
}

func (b *blocker) RoundTrip(req *http.Request) (*http.Response, error) {
	b.started.Add(1)
	select {
	case <-req.Context().Done():
		b.cancelled.Add(1)
		return nil, context.Cause(req.Context())
	case <-b.release:
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
	}
}

// TestGuardedWriteInFlightIsBounded: a guarded write in flight is cancelled
// when the leadership it was sent under ends.
func TestGuardedWriteInFlightIsBounded(t *testing.T) {
	for name, end := range map[string]func(h *harness){
		"renew deadline": func(h *harness) {
			h.failLeaseUpdates.Store(true)
			h.step(DefaultRenewDeadline)
		},
		"handover": func(h *harness) { h.prefer("better") },
	} {
		t.Run(name, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				c := h.start()
				h.elect(me)
				inner := &blocker{release: make(chan struct{})}
				defer close(inner.release)
				rt := guardedTransport(t, c, "https://example.invalid", inner)
				errs := make(chan error, 1)
				go func() {
					req, _ := http.NewRequest(http.MethodPut, "https://example.invalid/api/v1/namespaces/ns/configmaps/x", strings.NewReader("{}"))
					_, err := rt.RoundTrip(req)
					errs <- err
				}()
				synctest.Wait()
				if inner.started.Load() != 1 {
					t.Fatal("the guarded write was not sent while leader")
				}
				end(h)
				if c.IsLeader() {
					t.Fatal("still leader")
				}
				synctest.Wait()
				if inner.cancelled.Load() != 1 {
					t.Fatal("the write in flight was not cancelled when leadership ended")
				}
				if err := <-errs; !errors.Is(err, ErrNotLeader) {
					t.Errorf("cancelled write = %v, want ErrNotLeader", err)
				}
			})
		})
	}
}

// hangingAccess is the native access layer whose writes hang, until their
// context is done, while a hang function says so.
type hangingAccess struct {
	access.Interface
	hangLease     func(*coordinationv1.Lease) bool
	hangCandidate atomic.Bool
	hangDelete    atomic.Bool
	// returned receives the error of every hung call when it returns.
	returned chan error
}

func (a *hangingAccess) Leases(ns string) access.LeaseClient {
	return hangingLeases{a.Interface.Leases(ns), a}
}

func (a *hangingAccess) LeaseCandidates(ns string) access.CandidateClient {
	return hangingCandidates{a.Interface.LeaseCandidates(ns), a}
}

func (a *hangingAccess) hang(ctx context.Context) error {
	<-ctx.Done()
	a.returned <- ctx.Err()
	return ctx.Err()
}

type hangingLeases struct {
	access.LeaseClient
	a *hangingAccess
}

func (l hangingLeases) Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if l.a.hangLease != nil && l.a.hangLease(lease) {
		return nil, l.a.hang(ctx)
	}
	return l.LeaseClient.Update(ctx, lease)
}

type hangingCandidates struct {
	access.CandidateClient
	a *hangingAccess
}

func (c hangingCandidates) Update(ctx context.Context, lc *coordinationv1beta1.LeaseCandidate) (*coordinationv1beta1.LeaseCandidate, error) {
	if c.a.hangCandidate.Load() {
		return nil, c.a.hang(ctx)
	}
	return c.CandidateClient.Update(ctx, lc)
}

func (c hangingCandidates) Delete(ctx context.Context, name string, pre *metav1.Preconditions) error {
	if c.a.hangDelete.Load() {
		return c.a.hang(ctx)
	}
	return c.CandidateClient.Delete(ctx, name, pre)
}

func (h *harness) hanging(hangLease func(*coordinationv1.Lease) bool) *hangingAccess {
	return &hangingAccess{Interface: access.NewNative(h.client), hangLease: hangLease, returned: make(chan error, 100)}
}

// awaitReturn waits, in the bubble's time, for a hung call to give up.
func awaitReturn(t *testing.T, a *hangingAccess, what string) {
	t.Helper()
	select {
	case err := <-a.returned:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s returned %v, want its own timeout", what, err)
		}
	case <-time.After(time.Minute):
		t.Errorf("%s still hangs after a minute: it has no timeout", what)
	}
}

// TestWritesOutsideRenewalHaveTimeouts: the hand-over and the LeaseCandidate
// renewal each give up at their own timeout when the API server does not
// answer, so a hung call cannot block the loop that made it.
func TestWritesOutsideRenewalHaveTimeouts(t *testing.T) {
	t.Run("handover", func(t *testing.T) {
		bubble(t, func(t *testing.T, h *harness) {
			var hang atomic.Bool
			hang.Store(true)
			acc := h.hanging(func(l *coordinationv1.Lease) bool { return hang.Load() && holder(l) == "better" })
			h.start(func(c *Config) { c.access = acc })
			h.elect(me)
			h.prefer("better")
			awaitReturn(t, acc, "the handover's update")
			hang.Store(false)
		})
	})
	t.Run("LeaseCandidate renewal", func(t *testing.T) {
		bubble(t, func(t *testing.T, h *harness) {
			acc := h.hanging(nil)
			h.start(func(c *Config) { c.access = acc })
			acc.hangCandidate.Store(true)
			h.step(DefaultCandidateRenewInterval)
			awaitReturn(t, acc, "the LeaseCandidate renewal")
			acc.hangCandidate.Store(false)
		})
	})
}

// TestShutdownStepsHaveTheirOwnTimeouts: a slow delete of the LeaseCandidate
// does not use up the time of the release.
func TestShutdownStepsHaveTheirOwnTimeouts(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		acc := h.hanging(nil)
		h.start(func(c *Config) { c.access = acc })
		h.elect(me)
		acc.hangDelete.Store(true)
		h.stop()
		if got := holder(h.lease()); got != "" {
			t.Errorf("after shutdown with a hung delete the Lease names %q, want it released", got)
		}
	})
}

// electedWithoutInformer elects this identity and returns an elector whose
// informer never runs: its store shows the Lease as elected, and then only
// what the test puts there (a watch that lags, or delivers when told).
func (h *harness) electedWithoutInformer() *elector {
	h.t.Helper()
	c, err := New(h.config())
	if err != nil {
		h.t.Fatal(err)
	}
	h.elect(me)
	e := newElector(c, access.NewNative(h.client))
	if err := e.informer.GetStore().Add(h.lease()); err != nil {
		h.t.Fatal(err)
	}
	return e
}

// TestCurrentIsNeverOlderThanOwnWrites: with an informer lagging several writes
// behind, the elector never acts on a Lease older than its own last write.
func TestCurrentIsNeverOlderThanOwnWrites(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		e := h.electedWithoutInformer()
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if err := e.renew(ctx, nil, e.current()); err != nil {
			t.Fatal(err)
		}
		h.clock.Step(DefaultRetryPeriod)
		if err := e.renew(ctx, nil, e.current()); err != nil {
			t.Fatal(err)
		}
		if got, want := e.current().ResourceVersion, h.lease().ResourceVersion; got != want {
			t.Errorf("current() is at resourceVersion %s, the server (written by this elector) at %s", got, want)
		}
		e.stepDown(ctx, "test over")
	})
}

// TestAnswerOvertakenByTheWatch: the read after a conflicting renewal can be
// answered with the Lease as it was a moment before, after the watch has
// already delivered a newer version. The elector then acts on that newer
// version, not on the answer: taking the store for older than the answer
// would hide it until the Lease is written again (here the Lease names this
// identity again, and nobody else writes it).
func TestAnswerOvertakenByTheWatch(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		e := h.electedWithoutInformer()
		store := e.informer.GetStore()
		// Unseen yet: another holder is named (the renewal conflicts with it).
		named := h.lease().DeepCopy()
		named.Spec.HolderIdentity = ptr.To("other")
		named.Spec.LeaseTransitions = ptr.To(*named.Spec.LeaseTransitions + 1)
		h.put(named)
		answer := h.lease().DeepCopy()
		var back *coordinationv1.Lease
		h.client.PrependReactor("get", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
			if back != nil {
				return false, nil, nil
			}
			// The Lease is handed back to this identity, and the watch
			// delivers that before the read's answer arrives.
			back = answer.DeepCopy()
			back.Spec.HolderIdentity = ptr.To(me)
			back.Spec.LeaseTransitions = ptr.To(*back.Spec.LeaseTransitions + 1)
			back.ResourceVersion = h.nextRV()
			if err := h.client.Tracker().Update(leasesGVR, back, testNS); err != nil {
				t.Error(err)
			}
			if err := store.Update(back.DeepCopy()); err != nil {
				t.Error(err)
			}
			return true, answer.DeepCopy(), nil
		})
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		_ = e.renew(ctx, nil, e.current()) // conflicts, then reads
		if back == nil {
			t.Fatal("the renewal did not read the Lease after its conflict")
		}
		if got := e.current(); got.ResourceVersion != back.ResourceVersion {
			t.Errorf("current() is the read's answer (resourceVersion %s, holder %s), not the newer Lease the watch delivered before it (%s, holder %s)",
				got.ResourceVersion, holder(got), back.ResourceVersion, holder(back))
		}
		e.stepDown(ctx, "test over")
	})
}

// TestFailuresAreLoggedAsErrors: failed renewals are logged as errors, and a
// hand-over that keeps conflicting says that it gave up (and not that the Lease
// will expire).
func TestFailuresAreLoggedAsErrors(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.start()
		h.elect(me)
		h.failLeaseUpdates.Store(true)
		h.step(DefaultRetryPeriod)
		if len(h.logged(ktesting.LogError, "Renewing the Lease failed")) == 0 {
			t.Error("a failed renewal was not logged as an error")
		}
		h.failLeaseUpdates.Store(false)
		h.leaseConflicts.Store(10)
		h.prefer("better")
		got := h.logged(ktesting.LogError, "Letting the Lease go")
		if len(got) == 0 {
			t.Error("a hand-over given up after conflicts was not logged")
		}
		for _, msg := range got {
			if strings.Contains(msg, "expire") {
				t.Errorf("hand-over while running logged %q; the Lease is retried, not left to expire", msg)
			}
		}
		h.leaseConflicts.Store(0)
	})
}

// TestShutdownCancelledWritesAreNotErrors: writes of the LeaseCandidate cut
// short by shutdown are not logged as errors.
func TestShutdownCancelledWritesAreNotErrors(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		acc := h.hanging(nil)
		h.start(func(c *Config) { c.access = acc })
		acc.hangCandidate.Store(true)
		h.step(DefaultCandidateRenewInterval)
		h.stop()
		if got := h.logged(ktesting.LogError, "LeaseCandidate"); len(got) > 0 {
			t.Errorf("shutdown logged errors: %q", got)
		}
	})
}

// TestHealthCheckFailsOnceRunReturned: the health check passes before Run
// (the process is starting; a lock's candidate starts with the elector's
// first call) and fails once Run has returned.
func TestHealthCheckFailsOnceRunReturned(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c, err := New(h.config())
		if err != nil {
			t.Fatal(err)
		}
		check := c.HealthCheck(time.Second)
		if err := check.Check(nil); err != nil {
			t.Errorf("unhealthy before Run: %v", err)
		}
	})
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		check := c.HealthCheck(time.Second)
		if err := check.Check(nil); err != nil {
			t.Errorf("unhealthy while running: %v", err)
		}
		h.stop()
		if err := check.Check(nil); err == nil {
			t.Error("healthy after Run returned")
		}
	})
}

// TestGuardPassesRequestsThatChangeNothing: dry runs and the review APIs pass
// the write guard while this process is not leader.
func TestGuardPassesRequestsThatChangeNothing(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		inner := &recorder{}
		rt := guardedTransport(t, c, "https://example.invalid", inner)
		for _, u := range []string{
			"https://example.invalid/api/v1/namespaces/ns/configmaps?dryRun=All",
			"https://example.invalid/apis/authorization.k8s.io/v1/subjectaccessreviews",
			"https://example.invalid/apis/authentication.k8s.io/v1/tokenreviews",
		} {
			req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader("{}"))
			if _, err := rt.RoundTrip(req); err != nil {
				t.Errorf("POST %s while not leader: %v", u, err)
			}
		}
		if c.WrapConfig(nil) != nil {
			t.Error("WrapConfig(nil) != nil")
		}
	})
}

// TestGuardRefusesGetsThatAct: exec, attach, port-forward and proxy are GETs
// that act (a command, a stream, a request passed on), so the guard refuses
// them while this process is not leader; plain reads pass, also of objects
// named like those subresources.
func TestGuardRefusesGetsThatAct(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		inner := &recorder{}
		rt := guardedTransport(t, c, "https://example.invalid/prefix", inner)
		for _, tc := range []struct {
			path    string
			upgrade bool
			pass    bool
		}{
			{"/api/v1/namespaces/ns/pods/p/exec?command=rm", true, false},
			{"/api/v1/namespaces/ns/pods/p/exec?command=rm", false, false},
			{"/api/v1/namespaces/ns/pods/p/attach", true, false},
			{"/api/v1/namespaces/ns/pods/p/portforward", true, false},
			{"/api/v1/namespaces/ns/services/s:80/proxy/delete-everything", false, false},
			{"/api/v1/nodes/n/proxy/configz", false, false},
			{"/api/v1/namespaces/ns/pods/p", true, false}, // any upgrade
			{"/api/v1/namespaces/ns/pods/p/log", false, true},
			{"/api/v1/namespaces/ns/configmaps/proxy", false, true},
			{"/api/v1/namespaces/exec", false, true},
			{"/apis/apps/v1/namespaces/ns/deployments/exec/status", false, true},
			{"/api/v1/namespaces/ns/pods", false, true},
		} {
			req, _ := http.NewRequest(http.MethodGet, "https://example.invalid/prefix"+tc.path, nil)
			if tc.upgrade {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "SPDY/3.1")
			}
			_, err := rt.RoundTrip(req)
			if passed := err == nil; passed != tc.pass {
				t.Errorf("GET %s (upgrade %v) while not leader: %v; want passed %v", tc.path, tc.upgrade, err, tc.pass)
			}
			if !tc.pass && !errors.Is(err, ErrNotLeader) {
				t.Errorf("GET %s refused with %v, want ErrNotLeader", tc.path, err)
			}
		}
	})
}

// writtenRenewTimes returns the renewTime of every object the library wrote
// of the given resource, in order.
func (h *harness) writtenRenewTimes(gvr schema.GroupVersionResource) []time.Time {
	var out []time.Time
	for _, a := range h.client.Actions() {
		u, ok := a.(clienttesting.UpdateAction)
		if !ok || a.GetVerb() != "update" || a.GetResource() != gvr {
			continue
		}
		switch obj := u.GetObject().(type) {
		case *coordinationv1.Lease:
			out = append(out, obj.Spec.RenewTime.Time)
		case *coordinationv1beta1.LeaseCandidate:
			out = append(out, obj.Spec.RenewTime.Time)
		}
	}
	return out
}

// TestRenewTimeNeverGoesBack: a renewal never writes a renewTime older than
// the one stored, even when the stored one came from a clock ahead of this
// process's. For the LeaseCandidate, an answered ping from a controller whose
// clock is ahead by more than the renew interval is not undone by the next
// periodic renewal (which would make it look unanswered and be answered
// again, two writes for one); for the Lease, a holder named with a renewTime
// ahead of this process's clock renews forward from it.
func TestRenewTimeNeverGoesBack(t *testing.T) {
	t.Run("LeaseCandidate", func(t *testing.T) {
		bubble(t, func(t *testing.T, h *harness) {
			h.start()
			lc := h.candidate(me).DeepCopy()
			ping := metav1.NewMicroTime(h.clock.Now().Add(3 * DefaultCandidateRenewInterval))
			lc.Spec.PingTime = &ping
			h.put(lc)
			answered := h.candidate(me).Spec.RenewTime.Time
			if answered.Before(ping.Time) {
				t.Fatalf("ping at %v answered with renewTime %v", ping.Time, answered)
			}
			writes := h.countActions("update", candidatesGVR)
			h.step(DefaultCandidateRenewInterval)
			if n := h.countActions("update", candidatesGVR) - writes; n != 1 {
				t.Errorf("%d writes of the LeaseCandidate in one renew interval after the ping was answered, want 1", n)
			}
			prev := answered
			for _, rt := range h.writtenRenewTimes(candidatesGVR)[writes-1:] {
				if rt.Before(prev) {
					t.Errorf("a renewal wrote renewTime %v, older than the stored %v", rt, prev)
				}
				prev = rt
			}
			if got := h.candidate(me).Spec.RenewTime.Time; !got.After(answered) {
				t.Errorf("renewTime after the renewal %v, want after %v", got, answered)
			}
		})
	})
	t.Run("Lease", func(t *testing.T) {
		bubble(t, func(t *testing.T, h *harness) {
			c := h.start()
			ahead := metav1.NewMicroTime(h.clock.Now().Add(time.Minute))
			h.put(&coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testLease},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity: ptr.To(me), LeaseDurationSeconds: ptr.To[int32](15), LeaseTransitions: ptr.To[int32](1),
					AcquireTime: &ahead, RenewTime: &ahead,
				},
			})
			for range 3 {
				h.step(DefaultRetryPeriod)
			}
			if !c.IsLeader() {
				t.Fatal("not leading")
			}
			prev := ahead.Time
			written := h.writtenRenewTimes(leasesGVR)
			if len(written) < 4 {
				t.Fatalf("%d renewals, want 4", len(written))
			}
			for _, rt := range written {
				if !rt.After(prev) {
					t.Errorf("a renewal wrote renewTime %v, not after the stored %v", rt, prev)
				}
				prev = rt
			}
		})
	})
}

// TestGuardPassesReviewsBehindAServerPath: the review APIs pass the write
// guard, and other writes are refused, when the server URL has a path (a
// cluster behind a proxy such as https://host/k8s/clusters/c-1).
func TestGuardPassesReviewsBehindAServerPath(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		c := h.start()
		for _, host := range []string{"https://example.invalid/k8s/clusters/c-1", "https://example.invalid/k8s/clusters/c-1/", "https://example.invalid"} {
			inner := &recorder{}
			client, err := kubernetes.NewForConfig(c.WrapConfig(&rest.Config{Host: host, Transport: inner}))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			_, err = client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{}, metav1.CreateOptions{})
			if errors.Is(err, ErrNotLeader) || inner.n != 1 {
				t.Errorf("server %s: SelfSubjectAccessReview while not leader = %v (%d sent), want it sent", host, err, inner.n)
			}
			_, err = client.CoreV1().ConfigMaps(testNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			if !errors.Is(err, ErrNotLeader) || inner.n != 1 {
				t.Errorf("server %s: ConfigMap create while not leader = %v (%d sent), want ErrNotLeader", host, err, inner.n)
			}
		}
	})
}

// TestNoHolderIsSaidAtLevelZero: a candidate whose Lease nobody ever names a
// holder of (no election controller runs) says so once, at level 0, after a
// minute, and again after a later spell.
func TestNoHolderIsSaidAtLevelZero(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.start()
		const msg = "No election controller has named a holder"
		h.step(noHolderNotice - time.Second)
		if got := h.logged(ktesting.LogInfo, msg); len(got) != 0 {
			t.Fatalf("said before a minute passed: %q", got)
		}
		h.step(2 * time.Second)
		if got := h.logged(ktesting.LogInfo, msg); len(got) != 1 {
			t.Fatalf("after a minute without a Lease: %d notices, want 1", len(got))
		}
		h.step(5 * noHolderNotice)
		if got := h.logged(ktesting.LogInfo, msg); len(got) != 1 {
			t.Fatalf("the notice repeats: %d, want 1", len(got))
		}
		h.elect("other")
		h.step(time.Second)
		h.name("")
		h.step(noHolderNotice + time.Second)
		if got := h.logged(ktesting.LogInfo, msg); len(got) != 2 {
			t.Errorf("after a spell of a vacant Lease: %d notices, want 2", len(got))
		}
	})
}

// TestRecordsHighestToken: a record left by an earlier process is never
// lowered; a token only seen goes with the next write the registrar makes
// anyway; a term's token is recorded as soon as the term starts.
func TestRecordsHighestToken(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		lcs := coordinationv1beta1.SchemeGroupVersion.WithResource("leasecandidates")
		recorded := func() int32 { return access.HighestToken(h.candidate(me).Annotations) }
		h.put(&coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: me, Annotations: map[string]string{access.HighestTokenAnnotation: "3"}},
			Spec: coordinationv1beta1.LeaseCandidateSpec{LeaseName: testLease, BinaryVersion: "1.36.0", EmulationVersion: "1.35.0",
				Strategy: coordinationv1.OldestEmulationVersion, RenewTime: ptr.To(metav1.NewMicroTime(h.clock.Now()))},
		})
		c := h.start()
		if got := recorded(); got != 3 {
			t.Fatalf("an earlier process's record 3 became %d", got)
		}
		for range 5 {
			h.elect("other")
		}
		writes := h.countActions("update", lcs)
		h.step(DefaultRetryPeriod)
		if n := h.countActions("update", lcs); n != writes {
			t.Errorf("seeing other terms wrote the LeaseCandidate %d times, want none before its renewal", n-writes)
		}
		h.step(DefaultCandidateRenewInterval)
		if got := recorded(); got != 5 {
			t.Errorf("after its renewal the record is %d, want the 5 it saw", got)
		}
		h.elect(me)
		if !c.IsLeader() {
			t.Fatal("not leader")
		}
		synctest.Wait()
		if token, _ := c.Token(); token <= 5 || recorded() != token {
			t.Errorf("once a term with token %d started the record is %d, want the token", token, recorded())
		}
	})
}
