package candidate

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
)

const writerName = "system:serviceaccount:ns:me"

func TestAnnotatesCandidateWithWriter(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.start(func(c *Config) { c.Writer = writerName })
		lc := h.candidate(me)
		if lc == nil {
			t.Fatal("no LeaseCandidate created")
		}
		if got := lc.Annotations[access.WriterAnnotation]; got != writerName {
			t.Errorf("annotation %s = %q, want %q", access.WriterAnnotation, got, writerName)
		}
		// An answered ping keeps it.
		lc = lc.DeepCopy()
		lc.Spec.PingTime = ptr.To(metav1.NewMicroTime(h.clock.Now().Add(time.Second)))
		h.put(lc)
		lc = h.candidate(me)
		if !lc.Spec.RenewTime.Equal(lc.Spec.PingTime) || lc.Annotations[access.WriterAnnotation] != writerName {
			t.Errorf("after a ping: renewTime %v (ping %v), annotations %v", lc.Spec.RenewTime, lc.Spec.PingTime, lc.Annotations)
		}
		// Somebody removes it: it is written again at once, without
		// waiting for the renew interval.
		lc = lc.DeepCopy()
		lc.Annotations = nil
		h.put(lc)
		if got := h.candidate(me).Annotations[access.WriterAnnotation]; got != writerName {
			t.Errorf("after the annotation was removed: %q, want %q", got, writerName)
		}
	})
}

// TestAnnotatesExistingCandidate: a candidate registered without the
// annotation (by an older version, or by hand) gets it at once on start,
// other annotations kept, and a candidate annotated with another user is
// brought back to this process's.
func TestAnnotatesExistingCandidate(t *testing.T) {
	for name, existing := range map[string]map[string]string{
		"unannotated":     {"team": "a"},
		"another writer":  {"team": "a", access.WriterAnnotation: "someone-else"},
		"the same writer": {"team": "a", access.WriterAnnotation: writerName},
	} {
		t.Run(name, func(t *testing.T) {
			bubble(t, func(t *testing.T, h *harness) {
				h.put(&coordinationv1beta1.LeaseCandidate{
					ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: me, Annotations: existing},
					Spec: coordinationv1beta1.LeaseCandidateSpec{
						LeaseName: testLease, BinaryVersion: "1.36.0", EmulationVersion: "1.35.0", Strategy: coordinationv1.OldestEmulationVersion,
						RenewTime: ptr.To(metav1.NewMicroTime(t0)),
					},
				})
				h.start(func(c *Config) { c.Writer = writerName })
				got := h.candidate(me).Annotations
				if got[access.WriterAnnotation] != writerName || got["team"] != "a" {
					t.Errorf("annotations %v, want %s=%s and team=a", got, access.WriterAnnotation, writerName)
				}
			})
		})
	}
}

// TestUnknownWriterLeavesAnnotation: without a writer name the library
// neither adds nor removes the annotation.
func TestUnknownWriterLeavesAnnotation(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		h.put(&coordinationv1beta1.LeaseCandidate{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: me, Annotations: map[string]string{access.WriterAnnotation: "set-by-hand"}},
			Spec: coordinationv1beta1.LeaseCandidateSpec{
				LeaseName: testLease, BinaryVersion: "1.35.0", Strategy: coordinationv1.OldestEmulationVersion,
			},
		})
		h.start()
		lc := h.candidate(me)
		if lc.Spec.BinaryVersion != "1.36.0" || lc.Annotations[access.WriterAnnotation] != "set-by-hand" {
			t.Errorf("candidate %+v, annotations %v: want refreshed, annotation kept", lc.Spec, lc.Annotations)
		}
		h.stop() // deletes the candidate
		if h.candidate(me) != nil {
			t.Fatal("candidate not deleted on stop")
		}
		h.start()
		if lc := h.candidate(me); lc == nil || len(lc.Annotations) != 0 {
			t.Errorf("candidate created with annotations %v, want none", lc)
		}
	})
}

var reviewsGVR = schema.GroupVersionResource{Group: "authentication.k8s.io", Version: "v1", Resource: "selfsubjectreviews"}

// TestWriterFromServer: the writer is the user the server reports, asked
// once; transient failures are retried, and a server that cannot answer
// leaves it unknown without holding up the start.
func TestWriterFromServer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers []error // failures before the answer; nil ends the list with a success
		want    string
		wantOK  bool
	}{
		{name: "answered", answers: []error{nil}, want: writerName, wantOK: true},
		{name: "transient failures are retried", answers: []error{apierrors.NewInternalError(context.DeadlineExceeded), apierrors.NewServiceUnavailable("starting"), nil}, want: writerName, wantOK: true},
		{name: "no such API", answers: []error{apierrors.NewNotFound(reviewsGVR.GroupResource(), "")}, want: "", wantOK: true},
		{name: "forbidden", answers: []error{apierrors.NewForbidden(reviewsGVR.GroupResource(), "", nil)}, want: "", wantOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				client := fake.NewClientset()
				calls := 0
				client.PrependReactor("create", "selfsubjectreviews", func(clienttesting.Action) (bool, runtime.Object, error) {
					calls++
					if err := tc.answers[calls-1]; err != nil {
						return true, nil, err
					}
					return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{
						UserInfo: authenticationv1.UserInfo{Username: writerName},
					}}, nil
				})
				c := newTestCandidate(t, Config{})
				_, ctx := ktesting.NewTestContext(t)
				got, ok := c.writer(ctx, access.Clients{Kube: client})
				if got != tc.want || ok != tc.wantOK {
					t.Errorf("writer() = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
				}
				if calls != len(tc.answers) {
					t.Errorf("%d SelfSubjectReviews, want %d", calls, len(tc.answers))
				}
			})
		})
	}

	t.Run("configured writer is not asked for", func(t *testing.T) {
		client := fake.NewClientset()
		client.PrependReactor("*", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
			t.Errorf("unexpected request %s %s", a.GetVerb(), a.GetResource())
			return true, nil, nil
		})
		c := newTestCandidate(t, Config{Writer: "alice"})
		_, ctx := ktesting.NewTestContext(t)
		if got, ok := c.writer(ctx, access.Clients{Kube: client}); got != "alice" || !ok {
			t.Errorf("writer() = %q, %v; want alice, true", got, ok)
		}
	})

	// A process started during an API outage keeps trying, a retry period
	// apart once the first quick tries failed, for as long as the outage
	// lasts: it must look at the Lease soon after the API serves again.
	t.Run("a long outage is retried at the retry period", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const failures = 40
			client := fake.NewClientset()
			var at []time.Time
			client.PrependReactor("create", "selfsubjectreviews", func(clienttesting.Action) (bool, runtime.Object, error) {
				at = append(at, time.Now())
				if len(at) <= failures {
					return true, nil, apierrors.NewServiceUnavailable("etcd is restarting")
				}
				return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{
					UserInfo: authenticationv1.UserInfo{Username: writerName},
				}}, nil
			})
			c := newTestCandidate(t, Config{})
			_, ctx := ktesting.NewTestContext(t)
			if got, ok := c.writer(ctx, access.Clients{Kube: client}); got != writerName || !ok {
				t.Errorf("writer() = %q, %v; want %q, true", got, ok, writerName)
			}
			if len(at) != failures+1 {
				t.Fatalf("%d SelfSubjectReviews, want %d", len(at), failures+1)
			}
			retry := c.cfg.RetryPeriod
			for i := 1; i < len(at); i++ {
				if gap := at[i].Sub(at[i-1]); gap > retry+retry/10 {
					t.Errorf("try %d came %v after the one before; want at most the retry period %v and its jitter", i+1, gap, retry)
				}
			}
			if gap := at[len(at)-1].Sub(at[len(at)-2]); gap < retry {
				t.Errorf("tries %v apart after %d failures; want a retry period, %v", gap, failures, retry)
			}
		})
	})

	t.Run("cancelled while retrying", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			client := fake.NewClientset()
			client.PrependReactor("create", "selfsubjectreviews", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewServiceUnavailable("down")
			})
			c := newTestCandidate(t, Config{})
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if got, ok := c.writer(ctx, access.Clients{Kube: client}); got != "" || ok {
				t.Errorf("writer() = %q, %v after cancellation; want \"\", false", got, ok)
			}
		})
	})
}

// newTestCandidate is New with the fields a Config needs filled in.
func newTestCandidate(t *testing.T, cfg Config) *Candidate {
	t.Helper()
	cfg.Clients = access.Clients{Kube: fake.NewClientset()}
	cfg.Namespace, cfg.LeaseName, cfg.Identity, cfg.BinaryVersion = testNS, testLease, me, "1.36.0"
	cfg.Callbacks.OnStartedLeading = func(context.Context) {}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
