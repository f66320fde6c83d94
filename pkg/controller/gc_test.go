package controller

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestCollect(t *testing.T) {
	internal := apierrors.NewInternalError(errors.New("etcd is sad"))
	notFound := apierrors.NewNotFound(candidatesGVR.GroupResource(), "a")
	// serverWrite changes the server's copy of a without the cache seeing it.
	serverWrite := func(h *harness, change func(*metav1.ObjectMeta, *metav1.MicroTime) *metav1.MicroTime) {
		lc := h.serverCandidate("a")
		lc.Spec.RenewTime = change(&lc.ObjectMeta, lc.Spec.RenewTime)
		lc.ResourceVersion = h.nextRV()
		if err := h.client.Tracker().Update(candidatesGVR, lc, testNS); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name        string
		setup       func(h *harness) // a is listed at t0; the clock is then at t0+TTL
		key         string
		wantRequeue time.Duration
		wantErr     func(error) bool
		wantDelete  bool
		wantRV      string // of the delete precondition
		wantGone    bool
	}{
		{name: "expired: deleted with preconditions", wantDelete: true, wantRV: "1", wantGone: true},
		{
			name: "expired, written since without renewing: deleted at the re-read resourceVersion",
			setup: func(h *harness) {
				serverWrite(h, func(m *metav1.ObjectMeta, rt *metav1.MicroTime) *metav1.MicroTime {
					m.Labels = map[string]string{"x": "y"}
					return rt
				})
			},
			wantDelete: true, wantRV: "101", wantGone: true,
		},
		{
			name: "renewed on the server meanwhile: kept",
			setup: func(h *harness) {
				serverWrite(h, func(_ *metav1.ObjectMeta, _ *metav1.MicroTime) *metav1.MicroTime {
					return ptr.To(metav1.NewMicroTime(t0.Add(time.Hour)))
				})
			},
		},
		{
			name: "recreated under the same name: kept",
			setup: func(h *harness) {
				serverWrite(h, func(m *metav1.ObjectMeta, rt *metav1.MicroTime) *metav1.MicroTime {
					m.UID = "uid-a-2"
					return rt
				})
			},
		},
		{
			name: "already gone from the server",
			setup: func(h *harness) {
				if err := h.client.Tracker().Delete(candidatesGVR, testNS, "a"); err != nil {
					t.Fatal(err)
				}
			},
			wantGone: true,
		},
		{
			name:       "delete conflict: renewed meanwhile",
			setup:      func(h *harness) { h.failOn("delete", "leasecandidates", 1, conflictErr("leasecandidates", "a")) },
			wantDelete: true, wantRV: "1",
		},
		{
			name:       "delete not found",
			setup:      func(h *harness) { h.failOn("delete", "leasecandidates", 1, notFound) },
			wantDelete: true, wantRV: "1",
		},
		{
			name:       "delete error: returned",
			setup:      func(h *harness) { h.failOn("delete", "leasecandidates", 1, internal) },
			wantErr:    apierrors.IsInternalError,
			wantDelete: true, wantRV: "1",
		},
		{
			name:    "re-read error: returned",
			setup:   func(h *harness) { h.failOn("get", "leasecandidates", 1, internal) },
			wantErr: apierrors.IsInternalError,
		},
		{
			name: "not in the cache",
			key:  "gone",
		},
		{
			name: "renewed: not yet expired",
			setup: func(h *harness) {
				h.clock.SetTime(t0.Add(20 * time.Minute))
				h.renew("a", t0)
				h.clock.SetTime(t0.Add(35 * time.Minute))
			},
			wantRequeue: 15 * time.Minute,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.list(candidate("a", "1.30.0", "1.30.0"))
			h.step(30 * time.Minute)
			if tc.setup != nil {
				tc.setup(h)
			}
			key := keyOf("a")
			if tc.key != "" {
				key = keyOf(tc.key)
			}
			h.clearWrites()

			requeue, err := h.c.collect(h.ctx, key)

			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !tc.wantErr(err) {
				t.Fatalf("collect error = %v", err)
			}
			if requeue != tc.wantRequeue {
				t.Errorf("requeue = %v, want %v", requeue, tc.wantRequeue)
			}
			var deletes []written
			for _, w := range h.writes() {
				if w.verb == "delete" {
					deletes = append(deletes, w)
				} else {
					t.Errorf("unexpected write %v", w)
				}
			}
			if !tc.wantDelete {
				if len(deletes) != 0 {
					t.Errorf("deleted: %v", deletes)
				}
			} else {
				if len(deletes) != 1 || deletes[0].name != "a" {
					t.Fatalf("deletes = %v, want one of a", deletes)
				}
				pre := deletes[0].pre
				if pre == nil || ptr.Deref(pre.UID, "") != "uid-a" || ptr.Deref(pre.ResourceVersion, "") != tc.wantRV {
					t.Errorf("preconditions = %+v, want UID uid-a and resourceVersion %s", pre, tc.wantRV)
				}
			}
			_, getErr := h.client.Tracker().Get(candidatesGVR, testNS, "a")
			if gone := apierrors.IsNotFound(getErr); gone != tc.wantGone {
				t.Errorf("candidate gone from the server: %v, want %v", gone, tc.wantGone)
			}
			reads := 0
			for _, a := range h.client.Actions() {
				if a.GetVerb() == "get" {
					reads++
				}
			}
			if wantRead := tc.wantRequeue == 0 && tc.key == ""; (reads == 1) != wantRead || reads > 1 {
				t.Errorf("%d re-reads from the server, want %v", reads, map[bool]int{true: 1, false: 0}[wantRead])
			}
		})
	}
}

func TestCollectedCandidateLeavesTheElection(t *testing.T) {
	h := newHarness(t)
	h.list(candidate("a", "1.30.0", "1.30.0"))
	h.create(candidate("b", "1.31.0", "1.31.0"))
	for range 3 {
		h.step(10 * time.Minute)
		h.renew("b", h.clock.Now())
	}
	if _, err := h.c.collect(h.ctx, keyOf("a")); err != nil {
		t.Fatal(err)
	}
	if d, err := h.c.collect(h.ctx, keyOf("b")); err != nil || d != 30*time.Minute {
		t.Errorf("collect(b) = %v, %v; want a 30m requeue", d, err)
	}
	h.sync()
	if _, ok := h.c.obs.candidates[keyOf("a")]; ok {
		t.Error("the collected candidate's record is kept")
	}
	h.reconcile()
	if got := h.leaseWrites(); len(got) != 1 || holderOf(got[0].lease) != "b" {
		t.Errorf("Lease writes = %v, want b elected", got)
	}
}

func TestProcessNextGC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.list(candidate("a", "1.30.0", "1.30.0"))
		h.failOn("delete", "leasecandidates", 1, apierrors.NewInternalError(errors.New("boom")))

		settled()
		if n := h.c.gcQueue.Len(); n != 0 {
			t.Fatalf("GC queue length = %d before the TTL", n)
		}
		h.step(30 * time.Minute)
		settled()
		if n := h.c.gcQueue.Len(); n != 1 {
			t.Fatalf("GC queue length = %d at the TTL, want the candidate", n)
		}

		if !h.c.processNextGC(h.ctx) {
			t.Fatal("processNextGC reported shutdown")
		}
		if n := h.c.gcQueue.NumRequeues(keyOf("a")); n != 1 {
			t.Errorf("requeues = %d after a failed delete, want 1", n)
		}
		settled()
		h.step(time.Second)
		settled()
		if n := h.c.gcQueue.Len(); n != 1 {
			t.Fatalf("GC queue length = %d after the backoff, want the retry", n)
		}
		if !h.c.processNextGC(h.ctx) {
			t.Fatal("processNextGC reported shutdown")
		}
		if _, err := h.client.Tracker().Get(candidatesGVR, testNS, "a"); !apierrors.IsNotFound(err) {
			t.Errorf("candidate still on the server: %v", err)
		}
		if n := h.c.gcQueue.NumRequeues(keyOf("a")); n != 0 {
			t.Errorf("requeues = %d after success, want 0", n)
		}

		h.c.gcQueue.ShutDown()
		if h.c.processNextGC(h.ctx) {
			t.Error("processNextGC on a shut down queue reported more work")
		}
	})
}

// A candidate that is not expired yet is looked at again when it would be.
func TestProcessNextGCRequeuesAtExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.list(candidate("a", "1.30.0", "1.30.0"))
		h.c.gcQueue.Add(keyOf("a"))
		settled()
		h.step(10 * time.Minute)
		if !h.c.processNextGC(h.ctx) {
			t.Fatal("processNextGC reported shutdown")
		}
		// The handler's own AddAfter(TTL) and the requeue both land at t0+30m.
		settled()
		h.step(20*time.Minute - time.Nanosecond)
		settled()
		if n := h.c.gcQueue.Len(); n != 0 {
			t.Errorf("GC queue length = %d before expiry", n)
		}
		h.step(time.Nanosecond)
		settled()
		if n := h.c.gcQueue.Len(); n != 1 {
			t.Errorf("GC queue length = %d at expiry, want the requeue", n)
		}
	})
}

// A candidate that did not answer a ping is deleted once it has gone the
// unresponsive TTL without renewing, long before the candidate TTL, so that a
// LeaseCandidate left behind by a process that is gone costs no later
// election (nor the controller of a later term, which would not remember it
// went unanswered) a ping. One that renews, however late its answer, is kept.
func TestUnansweredCandidateIsCollected(t *testing.T) {
	for _, renews := range []bool{false, true} {
		t.Run(map[bool]string{false: "left behind", true: "renews late"}[renews], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t)
				// a ranks best; the controller found it at t0 and never saw
				// it renew. b is alive.
				h.list(candidate("a", "1.30.0", "1.30.0"))
				h.create(candidate("b", "1.31.0", "1.31.0"))
				h.reconcile()
				if got := h.pings(); len(got) != 1 || got[0] != "a" {
					t.Fatalf("pings = %v, want a", got)
				}
				h.step(DefaultPingTimeout)
				h.renew("b", h.clock.Now())
				h.clearWrites()
				h.reconcile()
				if got := h.expectOneLeaseWrite("create"); holderOf(got) != "b" {
					t.Fatalf("elected %q, want b", holderOf(got))
				}
				if d, err := h.c.collect(h.ctx, keyOf("a")); err != nil || d != DefaultUnresponsiveCandidateTTL-DefaultPingTimeout {
					t.Errorf("collect(a) = %v, %v; want a requeue when it has gone the unresponsive TTL without renewing", d, err)
				}
				if renews {
					h.step(5 * time.Minute)
					h.renew("a", h.clock.Now())
					h.step(DefaultUnresponsiveCandidateTTL - 5*time.Minute - DefaultPingTimeout)
				} else {
					h.step(DefaultUnresponsiveCandidateTTL - DefaultPingTimeout - time.Nanosecond)
					settled()
					if n := h.c.gcQueue.Len(); n != 0 {
						t.Fatalf("GC queue length = %d before the unresponsive TTL", n)
					}
					h.step(time.Nanosecond)
				}
				settled()
				if n := h.c.gcQueue.Len(); n != 1 {
					t.Fatalf("GC queue length = %d at the unresponsive TTL, want a", n)
				}
				if !h.c.processNextGC(h.ctx) {
					t.Fatal("processNextGC reported shutdown")
				}
				_, err := h.client.Tracker().Get(candidatesGVR, testNS, "a")
				if gone := apierrors.IsNotFound(err); gone == renews {
					t.Errorf("a gone from the server: %v (%v); want %v", gone, err, !renews)
				}
				if _, err := h.client.Tracker().Get(candidatesGVR, testNS, "b"); err != nil {
					t.Errorf("b: %v", err)
				}
			})
		})
	}
}
