package controller

import (
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func lagLease(rv string, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l", ResourceVersion: rv},
		Spec:       coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(renew))},
	}
}

// TestWatchLag: a write the watch has not delivered counts for as long as it
// is outstanding; once the watch delivers it, or a later version, nothing is
// known to be missing. Spread: writes made together reach a loaded server's
// watch as far apart as its requests take, even when the watch keeps up, so
// it remembers how long the writes of the last seconds took to show.
func TestWatchLag(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "l"}
	for _, tc := range []struct {
		name string
		run  func(w *WatchLag) time.Duration // the lag (or spread) it ends with
		want time.Duration
	}{
		{"nothing awaited", func(w *WatchLag) time.Duration { return w.At(t0) }, 0},
		{"a write not delivered yet counts for as long as it is outstanding", func(w *WatchLag) time.Duration {
			w.expect(key, t0, t0)
			w.observe(lagLease("9", t0.Add(-time.Second)), t0) // an older version
			return w.At(t0.Add(7 * time.Second))
		}, 7 * time.Second},
		{"once delivered, however late, it counts no more", func(w *WatchLag) time.Duration {
			w.expect(key, t0, t0)
			w.observe(lagLease("10", t0), t0)
			return w.At(t0.Add(7 * time.Second))
		}, 0},
		{"a later version shows it was delivered (a watch restart skips versions)", func(w *WatchLag) time.Duration {
			w.ExpectRenewal("ns", "l", t0, t0)
			w.observe(lagLease("12", t0.Add(2*time.Second)), t0.Add(2*time.Second))
			return w.At(t0.Add(5 * time.Second))
		}, 0},
		{"writes unseen in a row keep the age of the oldest", func(w *WatchLag) time.Duration {
			w.ExpectRenewal("ns", "l", t0, t0)
			w.ExpectRenewal("ns", "l", t0.Add(2*time.Second), t0.Add(2*time.Second))
			return w.At(t0.Add(3 * time.Second))
		}, 3 * time.Second},
		{"delivering an older write leaves the age of the oldest still unseen", func(w *WatchLag) time.Duration {
			w.ExpectRenewal("ns", "l", t0, t0)
			w.ExpectRenewal("ns", "l", t0.Add(2*time.Second), t0.Add(2*time.Second))
			w.ExpectRenewal("ns", "l", t0.Add(4*time.Second), t0.Add(4*time.Second))
			w.observe(lagLease("10", t0), t0)
			return w.At(t0.Add(5 * time.Second))
		}, 3 * time.Second},
		{"a watch that stays behind longer than maxLag keeps its lag", func(w *WatchLag) time.Duration {
			// Renewals every 2s, each delivered 15s late, for two minutes.
			for s := 0; s <= 120; s += 2 {
				sent := t0.Add(time.Duration(s) * time.Second)
				w.ExpectRenewal("ns", "l", sent, sent)
				if s >= 15 {
					w.observe(lagLease("10", sent.Add(-15*time.Second)), sent)
				}
			}
			return w.At(t0.Add(121 * time.Second))
		}, 15 * time.Second},
		{"a write delivered shows every earlier one, also after the clock was set back", func(w *WatchLag) time.Duration {
			w.ExpectRenewal("ns", "l", t0, t0)
			w.ExpectRenewal("ns", "l", t0.Add(2*time.Second), t0.Add(2*time.Second))
			// The wall clock is set back two minutes: renewTime moves back.
			w.ExpectRenewal("ns", "l", t0.Add(-2*time.Minute+4*time.Second), t0.Add(4*time.Second))
			w.ExpectRenewal("ns", "l", t0.Add(-2*time.Minute+6*time.Second), t0.Add(6*time.Second))
			w.observe(lagLease("12", t0.Add(-2*time.Minute+4*time.Second)), t0.Add(5*time.Second))
			return w.At(t0.Add(7 * time.Second))
		}, time.Second},
		{"a write that failed is not awaited", func(w *WatchLag) time.Duration {
			failed := w.ExpectRenewal("ns", "l", t0, t0)
			failed()
			return w.At(t0.Add(3 * time.Second))
		}, 0},
		{"a write unseen for maxLag is taken as lost", func(w *WatchLag) time.Duration {
			w.expect(key, t0, t0)
			return w.At(t0.Add(maxLag))
		}, 0},
		{"a deleted Lease's writes are not awaited", func(w *WatchLag) time.Duration {
			w.expect(key, t0, t0)
			w.forget(key)
			return w.At(t0.Add(10 * time.Second))
		}, 0},
		{"spread: nothing sent", func(w *WatchLag) time.Duration { return w.Spread(t0) }, 0},
		{"spread: a write seen 400ms after it was sent, the watch caught up since", func(w *WatchLag) time.Duration {
			w.expect(key, t0, t0)
			w.observe(lagLease("10", t0), t0.Add(400*time.Millisecond))
			if lag := w.At(t0.Add(time.Second)); lag != 0 {
				t.Errorf("lag = %s once the write was seen, want 0", lag)
			}
			return w.Spread(t0.Add(time.Second))
		}, 400 * time.Millisecond},
		{"spread: the longest of the last seconds' writes, each shown by a later one", func(w *WatchLag) time.Duration {
			w.expect(key, t0, t0)
			w.expect(key, t0.Add(100*time.Millisecond), t0.Add(100*time.Millisecond))
			w.observe(lagLease("11", t0.Add(100*time.Millisecond)), t0.Add(700*time.Millisecond))
			w.expect(key, t0.Add(2*time.Second), t0.Add(2*time.Second))
			w.observe(lagLease("12", t0.Add(2*time.Second)), t0.Add(2300*time.Millisecond))
			return w.Spread(t0.Add(3 * time.Second))
		}, 700 * time.Millisecond},
		{"spread: a prompt write sent after the slow ones showed ends their memory", func(w *WatchLag) time.Duration {
			w.expect(key, t0, t0)
			w.observe(lagLease("10", t0), t0.Add(3*time.Second)) // a server down for 3s
			w.expect(key, t0.Add(3100*time.Millisecond), t0.Add(3100*time.Millisecond))
			w.observe(lagLease("11", t0.Add(3100*time.Millisecond)), t0.Add(3150*time.Millisecond))
			return w.Spread(t0.Add(4 * time.Second))
		}, 50 * time.Millisecond},
		{"spread: a prompt write sent before a slow one showed does not", func(w *WatchLag) time.Duration {
			w.expect(key, t0, t0)
			w.expect(key, t0.Add(2900*time.Millisecond), t0.Add(2900*time.Millisecond))
			w.observe(lagLease("11", t0.Add(2900*time.Millisecond)), t0.Add(3*time.Second))
			return w.Spread(t0.Add(4 * time.Second))
		}, 3 * time.Second},
		{"spread: a server whose writes all show late is remembered", func(w *WatchLag) time.Duration {
			for i, d := range []time.Duration{2 * time.Second, 400 * time.Millisecond, 300 * time.Millisecond} {
				sent := t0.Add(time.Duration(i) * 2 * time.Second)
				w.expect(key, sent, sent)
				w.observe(lagLease(strconv.Itoa(10+i), sent), sent.Add(d))
			}
			return w.Spread(t0.Add(5 * time.Second))
		}, 2 * time.Second},
		{"spread: forgotten after spreadSeconds", func(w *WatchLag) time.Duration {
			w.expect(key, t0, t0)
			w.observe(lagLease("10", t0), t0.Add(400*time.Millisecond))
			return w.Spread(t0.Add(400*time.Millisecond + spreadSeconds*time.Second))
		}, 0},
		{"spread: a write outstanding counts for its age", func(w *WatchLag) time.Duration {
			w.expect(key, t0, t0)
			w.observe(lagLease("10", t0), t0.Add(100*time.Millisecond))
			w.expect(key, t0.Add(time.Second), t0.Add(time.Second))
			return w.Spread(t0.Add(3 * time.Second))
		}, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.run(&WatchLag{}); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}
